#include "config/toml_config.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "config/settings.h"
#include "config/toml_subset.h"

namespace kvpeer::config {
namespace {

std::set<std::string, std::less<>> FileKeys() {
  std::set<std::string, std::less<>> keys;
  for (const OptionSpec& option : Options()) {
    if (option.in_config_file) keys.emplace(option.name);
  }
  return keys;
}

Status CheckArrays(const std::vector<TomlEntry>& entries) {
  for (const TomlEntry& entry : entries) {
    const OptionSpec& option =
        *std::find_if(Options().begin(), Options().end(), [&](const OptionSpec& o) { return o.name == entry.key; });
    if (entry.is_array && !option.repeatable) {
      return Status::Invalid("line " + std::to_string(entry.line) + ": '" + entry.key +
                             "' takes one value, not an array");
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<CLI::ConfigItem> TomlSubsetConfig::from_config(std::istream& input) const {
  std::string text(std::istreambuf_iterator<char>(input), {});
  StatusOr<std::vector<TomlEntry>> entries = ParseTomlSubset(text, FileKeys());
  Status status = entries.ok() ? CheckArrays(*entries) : entries.status();
  if (!status.ok()) throw CLI::ConfigError(status.message());
  std::vector<CLI::ConfigItem> items;
  for (TomlEntry& entry : *entries) {
    CLI::ConfigItem item;
    item.name = entry.key;
    item.inputs = std::move(entry.values);
    // CLI11 drops an item without inputs; an empty array is a value (an
    // empty list: `features = []` offers none), given as one empty item
    // that the command-line parser removes again.
    if (entry.is_array && item.inputs.empty()) item.inputs.emplace_back();
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace kvpeer::config
