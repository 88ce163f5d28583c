// The control API's error codes (docs/control-api.md, "2. Errors").
//
// Failures in the daemon are Status values (base/status.h) whose codes
// include one per API error class; this is the one place that names them on
// the wire.
#pragma once

#include <string_view>

#include "base/status.h"

namespace kvpeer::daemon {

// The wire name of a failed status's class: "bad_request",
// "peer_unavailable", ... REQUIRES: !status.ok()
std::string_view ApiErrorCode(const Status& status);

}  // namespace kvpeer::daemon
