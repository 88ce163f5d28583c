// config/kvpeerd.example.toml against the option table: the example shows
// every config-file key exactly once, in table order, with the table's
// default and range, and a valid value for every key without a default.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/settings.h"
#include "config/toml_subset.h"
#include "test_files.h"

#ifndef KVPEER_EXAMPLE_CONFIG
#error "KVPEER_EXAMPLE_CONFIG must name config/kvpeerd.example.toml"
#endif

namespace kvpeer::config {
namespace {

using testing::Contains;
using testing::Parse;
using testing::TempDir;

std::string ReadExample() {
  std::ifstream in(KVPEER_EXAMPLE_CONFIG, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// One commented-out setting of the example: "#key = value".
struct ExampleSetting {
  std::string key;
  std::string line;       // the line without its leading '#'
  std::string paragraph;  // the comment lines since the last blank line
};

std::vector<ExampleSetting> ExampleSettings(const std::string& text) {
  static const std::regex kSetting("^#([a-z][a-z0-9-]*) = .*$");
  std::vector<ExampleSetting> settings;
  std::istringstream lines(text);
  std::string line;
  std::string paragraph;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (line.empty()) {
      paragraph.clear();
    } else if (std::regex_match(line, match, kSetting)) {
      settings.push_back({match[1], line.substr(1), paragraph});
    } else {
      paragraph += line + "\n";
    }
  }
  return settings;
}

std::vector<const OptionSpec*> FileOptions() {
  std::vector<const OptionSpec*> options;
  for (const OptionSpec& option : Options()) {
    if (option.in_config_file) options.push_back(&option);
  }
  return options;
}

std::set<std::string, std::less<>> FileKeys() {
  std::set<std::string, std::less<>> keys;
  for (const OptionSpec* option : FileOptions()) keys.emplace(option->name);
  return keys;
}

// The example with every setting uncommented.
std::string Uncommented(const std::vector<ExampleSetting>& settings) {
  std::string text;
  for (const ExampleSetting& setting : settings) text += setting.line + "\n";
  return text;
}

TEST_CASE("the example config names every config-file option once, in table order") {
  std::vector<ExampleSetting> settings = ExampleSettings(ReadExample());
  std::vector<std::string> example_keys;
  for (const ExampleSetting& setting : settings) example_keys.push_back(setting.key);
  std::vector<std::string> table_keys;
  for (const OptionSpec* option : FileOptions()) table_keys.emplace_back(option->name);
  CHECK(example_keys == table_keys);
}

TEST_CASE("the example config shows each option's default") {
  std::vector<ExampleSetting> settings = ExampleSettings(ReadExample());
  StatusOr<std::vector<TomlEntry>> parsed = ParseTomlSubset(Uncommented(settings), FileKeys());
  INFO(parsed.status().message());
  REQUIRE(parsed.ok());
  const std::vector<TomlEntry>& entries = *parsed;
  REQUIRE(entries.size() == settings.size());
  const std::vector<const OptionSpec*> options = FileOptions();
  for (size_t i = 0; i < entries.size(); ++i) {
    auto option_it =
        std::find_if(options.begin(), options.end(), [&](const OptionSpec* o) { return o->name == entries[i].key; });
    REQUIRE(option_it != options.end());
    const OptionSpec& option = **option_it;
    INFO("key " << entries[i].key);
    if (option.default_text.empty()) {
      // No default: the value is an example, and the comment says so.
      CHECK(Contains(settings[i].paragraph, "Default: unset"));
    } else {
      CHECK(Contains(settings[i].paragraph, "Default: " + std::string(option.default_text) + "\n"));
      REQUIRE(entries[i].values.size() == 1);
      CHECK(entries[i].values.front() == option.default_text);
    }
    CHECK(entries[i].is_array == option.repeatable);
  }
}

TEST_CASE("the example config states each bounded option's range as the table has it") {
  for (const ExampleSetting& setting : ExampleSettings(ReadExample())) {
    const auto option =
        std::find_if(Options().begin(), Options().end(), [&](const OptionSpec& o) { return o.name == setting.key; });
    REQUIRE(option != Options().end());
    if (!option->bounded()) continue;
    INFO("config/kvpeerd.example.toml: option '" << setting.key << "' must state its range " << option->RangeText()
                                                 << " in its comment");
    CHECK(Contains(setting.paragraph, option->RangeText()));
  }
}

TEST_CASE("the example config is valid as shipped and with every setting uncommented") {
  ParseResult shipped = Parse({"--config", KVPEER_EXAMPLE_CONFIG});
  INFO(shipped.message);
  CHECK(shipped.settings.has_value());

  // The psk-file example names a key file that does not exist here: point
  // it at a real one, keeping everything else as the example has it.
  TempDir dir;
  std::string psk = dir.Write("psk", std::string(32, 'k') + "\n");
  // Likewise the TLS files (the parser checks they exist; the daemon reads them).
  std::string pem = dir.Write("tls.pem", "-----BEGIN CERTIFICATE-----\n");
  std::string text;
  for (const ExampleSetting& setting : ExampleSettings(ReadExample())) {
    if (setting.key == "psk-file") {
      text += "psk-file = \"" + psk + "\"\n";
    } else if (setting.key.starts_with("tls-")) {
      text += setting.key + " = \"" + pem + "\"\n";
    } else {
      text += setting.line + "\n";
    }
  }
  ParseResult uncommented = Parse({"--config", dir.Write("all.toml", text)});
  INFO(uncommented.message);
  CHECK(uncommented.settings.has_value());
}

}  // namespace
}  // namespace kvpeer::config
