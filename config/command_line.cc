// ParseCommandLine: CLI11 over the option table, then the table's checks,
// the derived node id, the PSK and the TLS files.
#include <CLI/CLI.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "config/named_files.h"
#include "config/psk.h"
#include "config/settings.h"
#include "config/toml_config.h"
#include "config/version.h"

namespace kvpeer::config {
namespace {

struct Cli {
  std::unique_ptr<CLI::App> app;
  std::vector<CLI::Option*> options;  // parallel to Options()
  CLI::Option* check_config = nullptr;
};

Cli BuildCli() {
  Cli cli;
  cli.app = std::make_unique<CLI::App>("kvpeerd: per-node KV-cache block transfer daemon", "kvpeerd");
  cli.app->config_formatter(std::make_shared<TomlSubsetConfig>());
  cli.app->allow_config_extras(CLI::config_extras_mode::error);
  for (const OptionSpec& option : Options()) {
    const std::string flag = "--" + std::string(option.name);
    const std::string help = option.HelpText();
    CLI::Option* added = option.in_config_file ? cli.app->add_option(flag, help) : cli.app->set_config(flag, "", help);
    added->type_name(std::string(option.value_name));
    if (option.repeatable) added->take_all()->delimiter(',');
    cli.options.push_back(added);
  }
  const std::string check_help = "validate the settings and exit: 0 valid, 2 invalid";
  cli.check_config = cli.app->add_flag("--check-config", check_help);
  cli.check_config->configurable(false);
  std::string version = std::string("kvpeerd ") + kVersion + " (wire " + kWireVersion + ")";
  cli.app->set_version_flag("--version", version, "print the version and exit")->configurable(false);
  return cli;
}

std::string ConfigFileName(const Cli& cli) {
  for (size_t i = 0; i < Options().size(); ++i) {
    if (!Options()[i].in_config_file && !cli.options[i]->results().empty()) return cli.options[i]->results().front();
  }
  return "?";
}

// A CLI11 parse failure as the message an operator should see.
ParseResult ParseFailure(const Cli& cli, const CLI::ParseError& error) {
  std::string name = error.get_name();
  if (name == "CallForHelp" || name == "CallForAllHelp") return {std::nullopt, 0, cli.app->help()};
  if (name == "CallForVersion") return {std::nullopt, 0, std::string(error.what()) + "\n"};
  std::string file = ConfigFileName(cli);
  if (name == "ConfigError") return {std::nullopt, 2, "kvpeerd: config file '" + file + "': " + error.what() + "\n"};
  if (name == "FileError") {
    std::ifstream probe(file);  // CLI11 does not say why; ask again for errno
    std::string why = probe.good() ? "not readable" : std::strerror(errno);
    return {std::nullopt, 2, "kvpeerd: config: cannot read '" + file + "': " + why + "\n"};
  }
  return {std::nullopt, 2, "kvpeerd: " + std::string(error.what()) + "\nRun 'kvpeerd --help' for the flags.\n"};
}

// Applies every option that was given; returns one line per problem.
std::vector<std::string> ApplyOptions(const Cli& cli, Settings* settings) {
  std::vector<std::string> problems;
  for (size_t i = 0; i < Options().size(); ++i) {
    const OptionSpec& option = Options()[i];
    std::vector<std::string> raw = cli.options[i]->results();
    if (raw.empty()) continue;
    // A list's empty items are no items: `--features ""` and `= []` are empty lists.
    if (option.repeatable) std::erase(raw, std::string());
    Status why = option.apply(raw, settings);
    if (!why.ok()) problems.push_back(std::string(option.name) + ": " + why.message());
  }
  return problems;
}

// Settings that depend on others or on the machine: node id, the PSK and
// the TLS files. One line per problem.
std::vector<std::string> Finalize(Settings* settings) {
  std::vector<std::string> problems;
  if (settings->node_id_from_listen) {
    std::optional<std::string> id = DefaultNodeId(settings->listen);
    if (id) {
      settings->node_id = *id;
    } else {
      problems.push_back("node-id: cannot derive a default from this machine's hostname; set --node-id HOST:PORT");
    }
  }
  if (!settings->psk_file.empty()) {
    StatusOr<std::string> key = LoadPsk(settings->psk_file);
    if (key.ok()) {
      settings->psk = std::move(key).value();
    } else {
      problems.push_back(key.status().message());
    }
  }
  for (std::string& problem : TlsFileProblems(*settings)) problems.push_back(std::move(problem));
  return problems;
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  std::string text;
  for (const std::string& problem : problems) text += "kvpeerd: " + problem + "\n";
  return text;
}

}  // namespace

ParseResult ParseCommandLine(int argc, const char* const* argv) {
  if (Status problem = CheckConfigFiles(argc, argv); !problem.ok()) return {std::nullopt, 2, problem.message()};
  Cli cli = BuildCli();
  try {
    cli.app->parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return ParseFailure(cli, error);
  }
  Settings settings;
  std::vector<std::string> problems = ApplyOptions(cli, &settings);
  if (problems.empty()) problems = Finalize(&settings);
  if (!problems.empty()) return {std::nullopt, 2, JoinProblems(problems)};
  if (cli.check_config->count() > 0) {
    return {std::nullopt, 0,
            "kvpeerd: configuration is valid\n" + boost::json::serialize(EffectiveConfigJson(settings)) + "\n"};
  }
  return {std::move(settings), 0, ""};
}

}  // namespace kvpeer::config
