// The control API's error codes (docs/control-api.md, "2. Errors").
//
// Failures in the daemon are Status values (base/status.h) whose codes
// include one per API error class; this is the one place that names them on
// the wire.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "base/status.h"

namespace kvpeer::daemon {

// Every error code of the API, in the order the spec lists them.
inline constexpr std::array<std::string_view, 11> kApiErrorCodes = {
    "bad_request", "unknown_op",       "incompatible", "no_region",     "out_of_range", "conflict",
    "not_found",   "peer_unavailable", "too_large",    "shutting_down", "internal"};

// The index in kApiErrorCodes of a failed status's class (the errors_
// counters are kept in that order). REQUIRES: !status.ok()
size_t ApiErrorIndex(const Status& status);

// The wire name of a failed status's class: "bad_request",
// "peer_unavailable", ... REQUIRES: !status.ok()
inline std::string_view ApiErrorCode(const Status& status) { return kApiErrorCodes[ApiErrorIndex(status)]; }

}  // namespace kvpeer::daemon
