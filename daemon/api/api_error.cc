#include "daemon/api/api_error.h"

namespace kvpeer::daemon {

size_t ApiErrorIndex(const Status& status) {
  switch (status.code()) {
    case Status::Code::kInvalid:
      return 0;  // bad_request
    case Status::Code::kUnknownOp:
      return 1;  // unknown_op
    case Status::Code::kIncompatible:
      return 2;  // incompatible
    case Status::Code::kNoRegion:
      return 3;  // no_region
    case Status::Code::kOutOfRange:
      return 4;  // out_of_range
    case Status::Code::kConflict:
      return 5;  // conflict
    case Status::Code::kNotFound:
      return 6;  // not_found
    // A peer that broke the protocol has been disconnected: to the engine it
    // is unavailable like one that went away.
    case Status::Code::kViolation:
    case Status::Code::kUnavailable:
      return 7;  // peer_unavailable
    case Status::Code::kTooLarge:
      return 8;  // too_large
    case Status::Code::kShuttingDown:
      return 9;              // shutting_down
    case Status::Code::kOk:  // not an error: answering one is a bug
    case Status::Code::kInternal:
      return 10;  // internal
  }
  return 10;
}

}  // namespace kvpeer::daemon
