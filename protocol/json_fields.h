// Rule-checking readers for the fields of one decoded header object.
//
// Every rule of the wire spec's common field table (its section 2;
// docs/wire-protocol.md, "3. Field rules") is written
// once here; a message decoder in codec.cc is only a list of Read* calls that
// name its fields and their rules. The reader keeps the first failure and
// ignores later calls, so a decoder reads straight through without checking
// each step, and the reported field carries the message type and any array
// index ("fetch.block_indexes[4]") so an operator can find the culprit.
//
// Internal to the protocol library.
//
// Thread-safety: a FieldReader belongs to one decode call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "protocol/limits.h"
#include "protocol/messages.h"
#include "base/status.h"

namespace kvpeer::protocol {

// Length bounds of a string field, counted in Unicode code points, and
// whether control characters may appear in it.
struct StringRule {
  size_t min_chars;
  size_t max_chars;
  bool controls_allowed = true;
};
// peer_id, kv_request_id, hash_seed: wire spec section 2, "no control
// characters (U+0000 ..= U+001F, U+007F)".
inline constexpr StringRule kIdStringRule{1, kMaxStringChars, false};
inline constexpr StringRule kFreeStringRule{0, kMaxStringChars};  // config_fingerprint, reason
// Bounded only by the header length limit (connect_ack.proof).
inline constexpr StringRule kAnyStringRule{0, std::numeric_limits<size_t>::max()};
inline constexpr StringRule kFeatureNameRule{1, kMaxFeatureNameChars};  // an element of connect.features

// Inclusive bounds of an integer field.
struct IntegerRule {
  uint64_t min;
  uint64_t max;
};
inline constexpr IntegerRule kAnyUint64Rule{0, std::numeric_limits<uint64_t>::max()};
inline constexpr IntegerRule kBlockLenRule{1, kMaxBlockLen};

// epoch and nonce share a format (32 lowercase hex digits); the spec forbids
// an all-zero epoch but allows any nonce.
enum class TokenRule { kAnyValue, kNotAllZeros };

// Whether `text` keeps the identifier rule's "no control characters" (wire
// spec section 2): ok, or kInvalid with what is wrong, phrased to follow the
// field name, e.g. "must not contain control characters (U+0000 ..= U+001F,
// U+007F); character 3 is U+000A". The code is kInvalid because the check
// does not know where the text came from; the wire reader reports it as a
// kViolation. Shared with the control API, whose kv_request_id and hash_seed
// go on the wire.
Status ControlCharacterProblem(std::string_view text);

// "a string", "an integer", ... for messages that say what was found.
std::string_view JsonKindName(const boost::json::value& value);

// ---- The field rules as typed verdicts ----------------------------------------
// Written once for both JSON readers: the FieldReader below and the control
// API's RequestReader (daemon/api/json_request.h), which words its messages for
// engines (docs/control-api.md) but applies the same rules.

// Unicode characters (code points) in `utf8`, which the JSON parser has
// already validated: string lengths are counted in characters, not bytes.
size_t CountCodePoints(std::string_view utf8);

enum class IntegerVerdict {
  kOk,
  kNotAnInteger,  // not a number
  kFractional,    // a number with fraction or exponent, or beyond uint64
  kNegative,
  kOutOfRange,  // an integer >= 0 outside the rule's bounds
};
// Reads `value` under `rule`. *out holds the number when the verdict is kOk
// or kOutOfRange.
IntegerVerdict CheckInteger(const boost::json::value& value, IntegerRule rule, uint64_t* out);

enum class KeyVerdict {
  kOk,
  kNotAString,
  kBadLength,  // not 2 ..= 2 * kMaxKeyBytes hex digits
  kNotHex,     // a character other than 0-9, a-f
  kOddDigits,  // hex digits do not pair up into bytes
};
struct KeyCheck {
  KeyVerdict verdict;
  size_t bad_offset = 0;  // the offending character, for kNotHex
};
// Reads a key written as lowercase hex; *out holds its bytes when kOk.
KeyCheck CheckKey(const boost::json::value& value, Key* out);

class FieldReader {
 public:
  // `message_type` prefixes every reported field name.
  FieldReader(const boost::json::object& header, std::string_view message_type);

  FieldReader(const FieldReader&) = delete;
  FieldReader& operator=(const FieldReader&) = delete;

  // Required fields: a missing one is a violation.
  void ReadString(std::string_view name, StringRule rule, std::string* out);
  void ReadInteger(std::string_view name, IntegerRule rule, uint64_t* out);
  void ReadBool(std::string_view name, bool* out);
  void ReadToken(std::string_view name, TokenRule rule, std::string* out);
  // Keys arrive as lowercase hex and are stored as raw bytes.
  void ReadKeys(std::string_view name, std::vector<Key>* out);
  void ReadSlotIndexes(std::string_view name, size_t min_items, std::vector<SlotIndex>* out);
  void ReadBools(std::string_view name, std::vector<bool>* out);
  // A string with the syntax of peer_id.h (HOST:PORT, at most 261 characters).
  void ReadPeerId(std::string_view name, std::string* out);

  // An absent field leaves *out empty; a present one must pass `rule`.
  void ReadOptionalString(std::string_view name, StringRule rule, std::optional<std::string>* out);
  // An absent field leaves *out empty; a present one must be an array of at
  // most `max_items` strings, each passing `rule` (connect.features).
  void ReadOptionalStrings(std::string_view name, size_t max_items, StringRule rule, std::vector<std::string>* out);

  // Never fails the reader: records in *out whether `name` is absent, a valid
  // array of `expected_items` checksums (16 lowercase hex digits each), or
  // malformed and why (block_data.xxh3; spec section 7, docs/wire-protocol.md
  // "7.10 Block checksums").
  void ReadOptionalChecksums(std::string_view name, size_t expected_items, BlockChecksums* out) const;

  // Fails `name` unless its `size` equals the size of the parallel array
  // `other`.
  void RequireSameLength(std::string_view name, size_t size, std::string_view other, size_t other_size);

  const Status& status() const { return status_; }

 private:
  // The field's value, or nullptr (recording "is required") when absent or
  // when an earlier read already failed.
  const boost::json::value* FindRequired(std::string_view name);
  void Fail(std::string_view name, const std::string& rule);

  template <typename T, typename Parse>
  void ReadOne(std::string_view name, Parse parse, T* out);
  template <typename T, typename Parse>
  void ReadList(std::string_view name, size_t min_items, size_t max_items, Parse parse, std::vector<T>* out);

  const boost::json::object& header_;
  std::string message_type_;
  Status status_;
};

}  // namespace kvpeer::protocol
