// The daemon's log line format: every message is written with control
// characters escaped (config/printable.h), whoever logged it, so a peer id,
// a reason, a client name, a kv_request_id or a path that a peer or an
// engine supplied cannot forge log lines or drive a terminal
// (the control API spec, section 4; docs/security.md "Control socket and
// engines"). Escaping at the formatter covers every log call at once.
#pragma once

#include <memory>
#include <string>

#include <spdlog/formatter.h>

namespace kvpeer::daemon {

// An spdlog formatter for `pattern`, where the flag %* stands for the
// message with control characters escaped (use it instead of %v).
std::unique_ptr<spdlog::formatter> MakeLogFormatter(const std::string& pattern);

}  // namespace kvpeer::daemon
