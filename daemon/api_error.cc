#include "daemon/api_error.h"

namespace kvpeer::daemon {

std::string_view ApiErrorCode(const Status& status) {
  switch (status.code()) {
    case Status::Code::kInvalid: return "bad_request";
    case Status::Code::kUnknownOp: return "unknown_op";
    case Status::Code::kIncompatible: return "incompatible";
    case Status::Code::kNoRegion: return "no_region";
    case Status::Code::kOutOfRange: return "out_of_range";
    case Status::Code::kConflict: return "conflict";
    case Status::Code::kNotFound: return "not_found";
    // A peer that broke the protocol has been disconnected: to the engine it
    // is unavailable like one that went away.
    case Status::Code::kViolation:
    case Status::Code::kUnavailable: return "peer_unavailable";
    case Status::Code::kTooLarge: return "too_large";
    case Status::Code::kShuttingDown: return "shutting_down";
    case Status::Code::kOk:  // not an error: answering one is a bug
    case Status::Code::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace kvpeer::daemon
