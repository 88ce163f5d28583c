#include "kvpeer/result.h"

#include <array>
#include <utility>

namespace kvpeer {
namespace {

// The API's codes in ErrorCode order (control-api.md section 1).
constexpr std::array<std::pair<ErrorCode, std::string_view>, 11> kApiCodes{{
    {ErrorCode::kBadRequest, "bad_request"},
    {ErrorCode::kUnknownOp, "unknown_op"},
    {ErrorCode::kIncompatible, "incompatible"},
    {ErrorCode::kNoRegion, "no_region"},
    {ErrorCode::kOutOfRange, "out_of_range"},
    {ErrorCode::kConflict, "conflict"},
    {ErrorCode::kNotFound, "not_found"},
    {ErrorCode::kPeerUnavailable, "peer_unavailable"},
    {ErrorCode::kTooLarge, "too_large"},
    {ErrorCode::kShuttingDown, "shutting_down"},
    {ErrorCode::kInternal, "internal"},
}};

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) {
  for (const auto& [known, name] : kApiCodes) {
    if (known == code) return name;
  }
  switch (code) {
    case ErrorCode::kConnection:
      return "connection";
    case ErrorCode::kBadAnswer:
      return "bad_answer";
    case ErrorCode::kTimeout:
      return "timeout";
    default:
      return "unknown";
  }
}

ErrorCode ErrorCodeFromName(std::string_view name) {
  for (const auto& [code, known] : kApiCodes) {
    if (known == name) return code;
  }
  return ErrorCode::kUnknownCode;
}

}  // namespace kvpeer
