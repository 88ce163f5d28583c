// Status: the outcome of an operation that can fail, carried as a value.
//
// Errors cross layers as values, never as exceptions. A failed Status has a
// code and a message written for the person reading the log or the
// disconnect reason: it names the field and the rule that failed.
//
// Thread-safety: a Status is a plain value; distinct objects may be used
// from distinct threads.
#pragma once

#include <string>
#include <utility>

namespace kvpeer {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kViolation,      // the peer broke the wire protocol (closes the connection)
    kInvalid,        // a caller's request is malformed (local API misuse)
    kUnavailable,    // the operation cannot proceed now (peer gone, closed)
    kInternal,       // a bug: an invariant did not hold
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

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace kvpeer
