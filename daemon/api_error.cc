#include "daemon/api_error.h"

namespace kvpeer::daemon {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest: return "bad_request";
    case ErrorCode::kUnknownOp: return "unknown_op";
    case ErrorCode::kIncompatible: return "incompatible";
    case ErrorCode::kNoRegion: return "no_region";
    case ErrorCode::kOutOfRange: return "out_of_range";
    case ErrorCode::kConflict: return "conflict";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kPeerUnavailable: return "peer_unavailable";
    case ErrorCode::kTooLarge: return "too_large";
    case ErrorCode::kShuttingDown: return "shutting_down";
    case ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace kvpeer::daemon
