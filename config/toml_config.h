// CLI11's config-file hook, reading files with the strict TOML subset
// reader (config/toml_subset.h) and the option table's keys: an unknown key
// or an array for a single-valued option is a ConfigError naming the line.
//
// Thread-safety: stateless; CLI11 calls it while parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <vector>

namespace kvpeer::config {

class TomlSubsetConfig : public CLI::Config {
 public:
  // Throws CLI::ConfigError: CLI11's config interface reports failures only
  // so (docs/architecture.md: the one exception left besides invariants).
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

  // Writing config files is not offered (kvpeerd never calls config_to_str).
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return ""; }
};

}  // namespace kvpeer::config
