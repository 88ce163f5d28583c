// RequestReader: typed, rule-checking readers for the fields of one control
// API request (docs/control-api.md).
//
// Every op's parser (daemon/api/control_requests.h) reads its fields with
// these calls. The rules shared with the wire (string length in characters,
// integer ranges, hex keys) are checked by protocol/json_fields.h; this
// reader words their failures as the control API's messages. The reader
// keeps the first failure and ignores later calls, so a parser reads straight
// through and checks status() once; the failure is a bad_request whose
// message names the field, what was found and what is allowed ("field
// 'block_ids' must be an array of integers, not a string"). Ranges that
// depend on state (block ids against the region) are checked by the op,
// since they answer out_of_range.
//
// Thread-safety: a RequestReader belongs to one request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "daemon/api/api_error.h"
#include "protocol/messages.h"

namespace kvpeer::daemon {

// "a string", "an integer", "null", ... for messages that say what was found;
// protocol::JsonKindName but for numbers with fraction or exponent.
std::string_view JsonKind(const boost::json::value& value);

// Whether `value` holds, at any depth, a number out of double range (e.g.
// 1e999999 parses as infinity). Serialising one would print a token that
// is not JSON. The parser's depth limit bounds the recursion.
bool HasNonFiniteNumber(const boost::json::value& value);

class RequestReader {
 public:
  explicit RequestReader(const boost::json::object& request) : request_(request) {}
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Each read returns the field's value, or an empty value once this or an
  // earlier read failed (status() then says why).

  // A string of min_chars ..= max_chars Unicode characters.
  std::string String(std::string_view name, size_t min_chars, size_t max_chars);
  // kv_request_id and the like: 1 ..= 4096 characters (the wire's rule).
  // kv_request_id, hash_seed: they go on the wire, whose rule forbids
  // control characters (protocol::ControlCharacterProblem).
  std::string IdString(std::string_view name);
  // "host:port" with a non-empty host and a port 1 ..= 65535.
  std::string Peer(std::string_view name);
  // A non-negative integer ..= max.
  uint64_t Uint(std::string_view name, uint64_t max);
  // Any integer that fits int64 (engine job ids).
  int64_t Int(std::string_view name);
  bool Bool(std::string_view name);
  // Keys: an array of min_items ..= 65536 lowercase hex strings of 1 ..=
  // 4096 bytes each, returned as raw bytes.
  std::vector<protocol::Key> Keys(std::string_view name, size_t min_items);
  // Block ids: an array of min_items ..= 65536 non-negative integers. The
  // region's bound is checked by the caller (out_of_range).
  std::vector<uint64_t> BlockIds(std::string_view name, size_t min_items);

  // Optional variants: an absent field is nullopt.
  std::optional<uint64_t> OptionalUint(std::string_view name, uint64_t max);
  std::optional<bool> OptionalBool(std::string_view name);
  std::optional<std::string> OptionalString(std::string_view name, size_t min_chars, size_t max_chars);

  // Fails unless two parallel arrays have the same length.
  void SameLength(std::string_view name, size_t size, std::string_view other, size_t other_size);

  bool has(std::string_view name) const { return request_.contains(name); }
  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

 private:
  // The field, or nullptr (recording "is required") when it is absent or an
  // earlier read already failed.
  const boost::json::value* Required(std::string_view name);
  // The field if present and no read has failed yet.
  const boost::json::value* Present(std::string_view name);
  void Fail(std::string_view name, const std::string& rule);

  const boost::json::object& request_;
  Status status_;
};

}  // namespace kvpeer::daemon
