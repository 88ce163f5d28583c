// kvpeerd: the per-node KV-cache block transfer daemon.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "config/settings.h"
#include "daemon/daemon.h"
#include "daemon/log_format.h"

namespace {

void SetUpLogging(const kvpeer::config::Settings& settings) {
  auto logger = spdlog::stderr_logger_st("kvpeerd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(settings.log_level));
  // Under systemd, journald stamps every line itself. %* is the message
  // with control characters escaped (daemon/log_format.h).
  const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  spdlog::set_formatter(kvpeer::daemon::MakeLogFormatter(journal ? "<%l> %*" : "%Y-%m-%dT%H:%M:%S.%e %l %*"));
}

}  // namespace

int main(int argc, char** argv) {
  kvpeer::config::ParseResult parsed = kvpeer::config::ParseCommandLine(argc, argv);
  if (!parsed.settings) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message;
    return parsed.exit_code;
  }
  SetUpLogging(*parsed.settings);
  kvpeer::daemon::Daemon daemon(std::move(*parsed.settings), std::vector<std::string>(argv, argv + argc));
  return daemon.Run();
}
