#include "daemon/systemd_notify.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace kvpeer::daemon::systemd {
namespace {

// The notification protocol is newline-separated KEY=VALUE assignments, so a
// status text must stay on one line.
std::string OneLine(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

// Sends `state` (e.g. "READY=1"; may be empty) and, when `status` is not
// empty, a STATUS= line with it.
void Send(std::string_view state, std::string_view status) {
  std::string message(state);
  if (!status.empty()) {
    if (!message.empty()) message += '\n';
    message += "STATUS=" + OneLine(status);
  }
  if (message.empty()) return;
  const int result = sd_notify(/*unset_environment=*/0, message.c_str());
  if (result < 0) {
    spdlog::warn("cannot notify systemd ({}): {}", state.empty() ? "STATUS" : state, std::strerror(-result));
  }
}

}  // namespace

void Ready(std::string_view status) { Send("READY=1", status); }

void Status(std::string_view status) { Send("", status); }

void Stopping(std::string_view status) { Send("STOPPING=1", status); }

void Watchdog(std::string_view status) { Send("WATCHDOG=1", status); }

std::optional<std::chrono::microseconds> WatchdogInterval() {
  uint64_t usec = 0;
  const int enabled = sd_watchdog_enabled(/*unset_environment=*/0, &usec);
  if (enabled < 0) {
    spdlog::warn("ignoring the systemd watchdog settings: {}", std::strerror(-enabled));
    return std::nullopt;
  }
  if (enabled == 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec);
}

}  // namespace kvpeer::daemon::systemd
