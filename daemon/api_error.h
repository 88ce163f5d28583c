// Errors of the control API (docs/control-api.md, "2. Errors"), as values.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvpeer::daemon {

enum class ErrorCode {
  kBadRequest,
  kUnknownOp,
  kIncompatible,
  kNoRegion,
  kOutOfRange,
  kConflict,
  kNotFound,
  kPeerUnavailable,
  kTooLarge,
  kShuttingDown,
  kInternal,
};

// The wire name of a code: "bad_request", "peer_unavailable", ...
std::string_view ErrorCodeName(ErrorCode code);

struct ApiError {
  ErrorCode code;
  std::string message;  // which field, which value, what is allowed
};

// nullopt = success.
using ApiStatus = std::optional<ApiError>;

inline ApiStatus Fail(ErrorCode code, std::string message) { return ApiError{code, std::move(message)}; }

}  // namespace kvpeer::daemon
