// Status: the outcome of an operation that can fail, carried as a value.
//
// Errors cross layers as values, never as exceptions. A failed Status has a
// code and a message written for the person reading the log, the disconnect
// reason or the control API's error response: it names the field and the
// rule that failed. StatusOr<T> (base/status_or.h) carries a value or the
// Status that explains its absence.
//
// The codes are the classes of failure the layers tell apart. Besides the
// peer protocol's, they are the control API's error classes
// (docs/control-api.md, "2. Errors"), so a failure deep in the daemon reaches
// the engine with its class intact; daemon/api/api_error.h names each on the wire.
//
// [[nodiscard]]: a Status returned and dropped is a failure nobody handles,
// so the compiler refuses it (-Werror); a caller that really has nothing to
// do with a failure says so with IgnoreError() and a comment why.
//
// Thread-safety: a Status is a plain value; distinct objects may be used
// from distinct threads.
#pragma once

#include <string>
#include <utility>

namespace kvpeer {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kViolation,     // the peer broke the wire protocol (closes the connection)
    kInvalid,       // a caller's request is malformed (control API: bad_request)
    kUnavailable,   // the operation cannot proceed now: peer gone, closed, unreachable
    kInternal,      // a bug: an invariant did not hold
    kUnknownOp,     // the caller named an operation that does not exist
    kIncompatible,  // the caller's model settings differ from the node's
    kNoRegion,      // the operation needs a registered memory region first
    kOutOfRange,    // an index beyond the bounds of the state it addresses
    kConflict,      // the request collides with state in use (a name, a slot, a limit)
    kNotFound,      // the named thing does not exist (any more)
    kTooLarge,      // the request exceeds a size limit
    kShuttingDown,  // the process is draining and refuses new work
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status Violation(std::string message) { return Status(Code::kViolation, std::move(message)); }
  // A validation failure that names the field and the rule, e.g.
  // FieldViolation("keys[3]", "must be lowercase hex") -> "keys[3]: must be lowercase hex".
  static Status FieldViolation(const std::string& field, const std::string& rule) {
    return Status(Code::kViolation, field + ": " + rule);
  }
  static Status Invalid(std::string message) { return Status(Code::kInvalid, std::move(message)); }
  static Status Unavailable(std::string message) { return Status(Code::kUnavailable, std::move(message)); }
  static Status Internal(std::string message) { return Status(Code::kInternal, std::move(message)); }
  static Status UnknownOp(std::string message) { return Status(Code::kUnknownOp, std::move(message)); }
  static Status Incompatible(std::string message) { return Status(Code::kIncompatible, std::move(message)); }
  static Status NoRegion(std::string message) { return Status(Code::kNoRegion, std::move(message)); }
  static Status OutOfRange(std::string message) { return Status(Code::kOutOfRange, std::move(message)); }
  static Status Conflict(std::string message) { return Status(Code::kConflict, std::move(message)); }
  static Status NotFound(std::string message) { return Status(Code::kNotFound, std::move(message)); }
  static Status TooLarge(std::string message) { return Status(Code::kTooLarge, std::move(message)); }
  static Status ShuttingDown(std::string message) { return Status(Code::kShuttingDown, std::move(message)); }

  bool ok() const { return code_ == Code::kOk; }
  // Drops a failure on purpose (see [[nodiscard]] above); the call site says why.
  void IgnoreError() const {}
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace kvpeer
