#include "daemon/json_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/hex.h"
#include "base/host_port.h"
#include "base/utf8.h"
#include "protocol/codec.h"
#include "protocol/json_fields.h"
#include "protocol/limits.h"

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

// The rule a value broke, or nullopt when it passed; the reader adds the
// field's name.
using Broken = std::optional<std::string>;

Broken NotA(std::string_view wanted, const json::value& value) {
  return "must be " + std::string(wanted) + ", not " + std::string(JsonKind(value));
}

// Boost.JSON has already rejected invalid UTF-8, so each code point has
// exactly one byte that is not a continuation byte.
size_t CountChars(std::string_view utf8) {
  return static_cast<size_t>(
      std::count_if(utf8.begin(), utf8.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

Broken ParseUint(const json::value& value, uint64_t max, uint64_t* out) {
  const std::string wanted = "an integer in 0 ..= " + std::to_string(max);
  if (const uint64_t* u = value.if_uint64()) {
    *out = *u;
  } else if (const int64_t* i = value.if_int64()) {
    if (*i < 0) return "must be " + wanted + ", is " + std::to_string(*i);
    *out = static_cast<uint64_t>(*i);
  } else {
    return NotA(wanted, value);
  }
  if (*out > max) return "must be " + wanted + ", is " + std::to_string(*out);
  return std::nullopt;
}

Broken ParseKey(const json::value& value, protocol::Key* out) {
  const json::string* text = value.if_string();
  if (text == nullptr) return NotA("a string of lowercase hex digits", value);
  constexpr size_t kMaxDigits = 2 * protocol::kMaxKeyBytes;
  if (text->empty() || text->size() > kMaxDigits) {
    return "must have 2 ..= " + std::to_string(kMaxDigits) + " hex digits, has " + std::to_string(text->size());
  }
  if (!DecodeHex(*text, out)) {
    return "must be lowercase hex (0-9, a-f) with an even number of digits, is '" +
           Utf8Prefix(*text, 64) + "'";
  }
  return std::nullopt;
}

Broken ParsePeer(const json::value& value, std::string* out) {
  const json::string* text = value.if_string();
  if (text == nullptr) return NotA("a \"host:port\" string", value);
  const std::string_view peer(*text);
  const std::optional<HostPort> address = SplitHostPort(peer);
  if (!address || address->port == 0 || peer.size() > protocol::kMaxStringChars) {
    return "must be \"host:port\" with a port 1 ..= 65535, is '" + Utf8Prefix(peer, 256) + "'";
  }
  out->assign(peer);
  return std::nullopt;
}

template <typename T, typename Parse>
Broken ParseList(const json::value& value, size_t min_items, std::string_view item_kind, Parse parse,
                 std::vector<T>* out, size_t* bad_index) {
  const json::array* items = value.if_array();
  if (items == nullptr) return NotA("an array of " + std::string(item_kind), value);
  if (items->size() < min_items || items->size() > protocol::kMaxListItems) {
    return "must have " + std::to_string(min_items) + " ..= " + std::to_string(protocol::kMaxListItems) +
           " items, has " + std::to_string(items->size());
  }
  std::vector<T> parsed(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    if (Broken broken = parse((*items)[i], &parsed[i])) {
      *bad_index = i;
      return broken;
    }
  }
  *out = std::move(parsed);
  return std::nullopt;
}

}  // namespace

bool HasNonFiniteNumber(const json::value& value) {
  switch (value.kind()) {
    case json::kind::double_:
      return !std::isfinite(value.get_double());
    case json::kind::array:
      return std::any_of(value.get_array().begin(), value.get_array().end(),
                         [](const json::value& item) { return HasNonFiniteNumber(item); });
    case json::kind::object:
      return std::any_of(value.get_object().begin(), value.get_object().end(),
                         [](const json::key_value_pair& item) { return HasNonFiniteNumber(item.value()); });
    default:
      return false;
  }
}

std::string_view JsonKind(const json::value& value) {
  switch (value.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a bool";
    case json::kind::int64:
    case json::kind::uint64: return "an integer";
    case json::kind::double_: return "a number with a fraction or exponent";
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "a JSON value";
}

void RequestReader::Fail(std::string_view name, const std::string& rule) {
  if (!status_) status_ = ApiError{ErrorCode::kBadRequest, "field '" + std::string(name) + "' " + rule};
}

const json::value* RequestReader::Present(std::string_view name) {
  if (status_) return nullptr;
  return request_.if_contains(name);
}

const json::value* RequestReader::Required(std::string_view name) {
  if (status_) return nullptr;
  const json::value* value = request_.if_contains(name);
  if (value == nullptr) Fail(name, "is required");
  return value;
}

void RequestReader::String(std::string_view name, size_t min_chars, size_t max_chars, std::string* out) {
  const json::value* value = Required(name);
  if (value == nullptr) return;
  const json::string* text = value->if_string();
  if (text == nullptr) return Fail(name, *NotA("a string", *value));
  const size_t chars = CountChars(*text);
  if (chars < min_chars || chars > max_chars) {
    return Fail(name, "must be " + std::to_string(min_chars) + " ..= " + std::to_string(max_chars) +
                          " characters long, has " + std::to_string(chars));
  }
  out->assign(text->data(), text->size());
}

void RequestReader::IdString(std::string_view name, std::string* out) {
  std::string text;
  String(name, 1, protocol::kMaxStringChars, &text);
  if (text.empty()) return;  // absent or of the wrong kind: already failed
  if (std::optional<std::string> problem = protocol::ControlCharacterProblem(text)) return Fail(name, *problem);
  *out = std::move(text);
}

void RequestReader::Peer(std::string_view name, std::string* out) {
  const json::value* value = Required(name);
  if (value == nullptr) return;
  if (Broken broken = ParsePeer(*value, out)) Fail(name, *broken);
}

void RequestReader::Uint(std::string_view name, uint64_t max, uint64_t* out) {
  const json::value* value = Required(name);
  if (value == nullptr) return;
  uint64_t parsed = 0;
  if (Broken broken = ParseUint(*value, max, &parsed)) return Fail(name, *broken);
  *out = parsed;
}

void RequestReader::Int(std::string_view name, int64_t* out) {
  const json::value* value = Required(name);
  if (value == nullptr) return;
  if (const int64_t* i = value->if_int64()) {
    *out = *i;
  } else if (const uint64_t* u = value->if_uint64();
             u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    *out = static_cast<int64_t>(*u);
  } else {
    Fail(name, value->is_uint64() ? "must be an integer that fits int64" : *NotA("an integer", *value));
  }
}

void RequestReader::Bool(std::string_view name, bool* out) {
  const json::value* value = Required(name);
  if (value == nullptr) return;
  if (!value->is_bool()) return Fail(name, *NotA("true or false", *value));
  *out = value->get_bool();
}

void RequestReader::Keys(std::string_view name, size_t min_items, std::vector<protocol::Key>* out) {
  const json::value* value = Required(name);
  if (value == nullptr) return;
  size_t bad = 0;
  if (Broken broken = ParseList(*value, min_items, "lowercase hex strings", ParseKey, out, &bad)) {
    const bool item = value->is_array() && bad < value->get_array().size() &&
                      broken->rfind("must have", 0) != 0;
    Fail(item ? std::string(name) + "[" + std::to_string(bad) + "]" : std::string(name), *broken);
  }
}

void RequestReader::BlockIds(std::string_view name, size_t min_items, std::vector<uint64_t>* out) {
  const json::value* value = Required(name);
  if (value == nullptr) return;
  auto parse = [](const json::value& item, uint64_t* id) {
    return ParseUint(item, std::numeric_limits<uint64_t>::max(), id);
  };
  size_t bad = 0;
  if (Broken broken = ParseList(*value, min_items, "integers", parse, out, &bad)) {
    if (!value->is_array() || broken->rfind("must have", 0) == 0) return Fail(name, *broken);
    Fail(name, "must be an array of non-negative integers; item " + std::to_string(bad) + " is " +
                   std::string(JsonKind(value->get_array()[bad])) +
                   (value->get_array()[bad].is_int64() ? " below 0" : ""));
  }
}

void RequestReader::OptionalUint(std::string_view name, uint64_t max, std::optional<uint64_t>* out) {
  if (Present(name) == nullptr) return;
  uint64_t parsed = 0;
  Uint(name, max, &parsed);
  if (!status_) *out = parsed;
}

void RequestReader::OptionalBool(std::string_view name, std::optional<bool>* out) {
  if (Present(name) == nullptr) return;
  bool parsed = false;
  Bool(name, &parsed);
  if (!status_) *out = parsed;
}

void RequestReader::OptionalString(std::string_view name, size_t min_chars, size_t max_chars,
                                   std::optional<std::string>* out) {
  if (Present(name) == nullptr) return;
  std::string parsed;
  String(name, min_chars, max_chars, &parsed);
  if (!status_) *out = std::move(parsed);
}

void RequestReader::SameLength(std::string_view name, size_t size, std::string_view other, size_t other_size) {
  if (status_ || size == other_size) return;
  Fail(name, "must have as many items as '" + std::string(other) + "' (" + std::to_string(other_size) + "), has " +
                 std::to_string(size));
}

}  // namespace kvpeer::daemon
