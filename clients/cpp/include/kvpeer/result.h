// Results of kvpeer client calls: a value or an Error, never an exception.
//
// Error carries a code (ErrorCode: the control API's error codes of
// control-api.md section 1, plus the client's own transport and decoding
// failures) and the daemon's message. Callers decide by the code; the
// message is for people.
//
//   kvpeer::Result<kvpeer::PollReport> report = client.Poll(0);
//   if (!report.ok()) { log(report.error().message); return; }
//   for (const kvpeer::JobResult& job : report.value().results) ...
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvpeer {

enum class ErrorCode {
  // The daemon's answers (control-api.md section 1, "Error codes").
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
  // An error code this client does not know (a newer daemon).
  kUnknownCode,
  // The client's own: the socket could not be reached, or broke.
  kConnection,
  // The daemon's answer was not what the API promises (not JSON, a field
  // missing or of the wrong type, a line longer than 16 MiB; the last
  // closes the client).
  kBadAnswer,
  // The client's own: no connection, or no answer (or the request could
  // not be sent), within the client's deadline (ClientOptions). The client
  // is closed: a late answer would be taken for the next request's.
  kTimeout,
};

// The wire name of a code ("bad_request"); "unknown" for kUnknownCode and
// the client's own codes' names ("connection", "bad_answer").
std::string_view ErrorCodeName(ErrorCode code);
// The code of a wire name; kUnknownCode for names the API does not list.
ErrorCode ErrorCodeFromName(std::string_view name);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  // Reading the value of an error (or the error of a value) aborts: it is a
  // bug in the caller, in every build.
  T& value() & {
    Require(0);
    return std::get<0>(state_);
  }
  const T& value() const& {
    Require(0);
    return std::get<0>(state_);
  }
  T&& value() && {
    Require(0);
    return std::get<0>(std::move(state_));
  }
  const Error& error() const {
    Require(1);
    return std::get<1>(state_);
  }

 private:
  void Require(size_t index) const {
    if (state_.index() != index) std::abort();
  }
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design

  bool ok() const { return ok_; }
  const Error& error() const {
    if (ok_) std::abort();
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace kvpeer
