#include "daemon/api/json_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/host_port.h"
#include "base/status_or.h"
#include "base/utf8.h"
#include "protocol/json_fields.h"
#include "protocol/limits.h"

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

// Each parser returns ok, or kInvalid with the rule the value broke; the
// reader adds the field's name.
Status Broken(std::string rule) { return Status::Invalid(std::move(rule)); }

Status NotA(std::string_view wanted, const json::value& value) {
  return Broken("must be " + std::string(wanted) + ", not " + std::string(JsonKind(value)));
}

StatusOr<uint64_t> ParseUint(const json::value& value, uint64_t max) {
  const std::string wanted = "an integer in 0 ..= " + std::to_string(max);
  uint64_t parsed = 0;
  switch (protocol::CheckInteger(value, protocol::IntegerRule{0, max}, &parsed)) {
    case protocol::IntegerVerdict::kOk:
      return parsed;
    case protocol::IntegerVerdict::kNotAnInteger:
    case protocol::IntegerVerdict::kFractional:
      break;
    case protocol::IntegerVerdict::kNegative:
      return Broken("must be " + wanted + ", is " + std::to_string(value.get_int64()));
    case protocol::IntegerVerdict::kOutOfRange:
      return Broken("must be " + wanted + ", is " + std::to_string(parsed));
  }
  return NotA(wanted, value);
}

StatusOr<protocol::Key> ParseKey(const json::value& value) {
  protocol::Key key;
  switch (protocol::CheckKey(value, &key).verdict) {
    case protocol::KeyVerdict::kOk:
      return key;
    case protocol::KeyVerdict::kNotAString:
      break;
    case protocol::KeyVerdict::kBadLength:
      return Broken("must have 2 ..= " + std::to_string(2 * protocol::kMaxKeyBytes) + " hex digits, has " +
                    std::to_string(value.get_string().size()));
    case protocol::KeyVerdict::kNotHex:
    case protocol::KeyVerdict::kOddDigits:
      return Broken("must be lowercase hex (0-9, a-f) with an even number of digits, is '" +
                    Utf8Prefix(value.get_string(), 64) + "'");
  }
  return NotA("a string of lowercase hex digits", value);
}

StatusOr<std::string> ParsePeer(const json::value& value) {
  const json::string* text = value.if_string();
  if (text == nullptr) return NotA("a \"host:port\" string", value);
  const std::string_view peer(*text);
  const std::optional<HostPort> address = SplitHostPort(peer);
  if (!address || address->port == 0 || peer.size() > protocol::kMaxStringChars) {
    return Broken("must be \"host:port\" with a port 1 ..= 65535, is '" + Utf8Prefix(peer, 256) + "'");
  }
  return std::string(peer);
}

// Why a list was refused: the list as a whole (its kind or length), or the
// item at `item`.
struct ListProblem {
  std::optional<size_t> item;
  std::string rule;
};

// The items, or why the list was refused.
template <typename T>
struct ParsedList {
  std::vector<T> items;
  std::optional<ListProblem> problem;
};

template <typename T, typename Parse>
ParsedList<T> ParseList(const json::value& value, size_t min_items, std::string_view item_kind, Parse parse) {
  const json::array* items = value.if_array();
  if (items == nullptr) {
    return {{}, ListProblem{std::nullopt, NotA("an array of " + std::string(item_kind), value).message()}};
  }
  if (items->size() < min_items || items->size() > protocol::kMaxListItems) {
    return {{},
            ListProblem{std::nullopt, "must have " + std::to_string(min_items) +
                                          " ..= " + std::to_string(protocol::kMaxListItems) + " items, has " +
                                          std::to_string(items->size())}};
  }
  ParsedList<T> parsed;
  parsed.items.reserve(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    StatusOr<T> item = parse((*items)[i]);
    if (!item.ok()) return {{}, ListProblem{i, item.status().message()}};
    parsed.items.push_back(std::move(*item));
  }
  return parsed;
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
  // Engines write JSON by hand more than peers do: name the number's form.
  if (value.is_double()) return "a number with a fraction or exponent";
  return protocol::JsonKindName(value);
}

void RequestReader::Fail(std::string_view name, const std::string& rule) {
  if (status_.ok()) status_ = Status::Invalid("field '" + std::string(name) + "' " + rule);
}

const json::value* RequestReader::Present(std::string_view name) {
  if (!status_.ok()) return nullptr;
  return request_.if_contains(name);
}

const json::value* RequestReader::Required(std::string_view name) {
  if (!status_.ok()) return nullptr;
  const json::value* value = request_.if_contains(name);
  if (value == nullptr) Fail(name, "is required");
  return value;
}

std::string RequestReader::String(std::string_view name, size_t min_chars, size_t max_chars) {
  const json::value* value = Required(name);
  if (value == nullptr) return {};
  const json::string* text = value->if_string();
  if (text == nullptr) {
    Fail(name, NotA("a string", *value).message());
    return {};
  }
  const size_t chars = protocol::CountCodePoints(*text);
  if (chars < min_chars || chars > max_chars) {
    Fail(name, "must be " + std::to_string(min_chars) + " ..= " + std::to_string(max_chars) + " characters long, has " +
                   std::to_string(chars));
    return {};
  }
  return std::string(text->data(), text->size());
}

std::string RequestReader::IdString(std::string_view name) {
  std::string text = String(name, 1, protocol::kMaxStringChars);
  if (text.empty()) return {};  // absent or of the wrong kind: already failed
  if (Status problem = protocol::ControlCharacterProblem(text); !problem.ok()) {
    Fail(name, problem.message());
    return {};
  }
  return text;
}

std::string RequestReader::Peer(std::string_view name) {
  const json::value* value = Required(name);
  if (value == nullptr) return {};
  StatusOr<std::string> peer = ParsePeer(*value);
  if (!peer.ok()) {
    Fail(name, peer.status().message());
    return {};
  }
  return std::move(*peer);
}

uint64_t RequestReader::Uint(std::string_view name, uint64_t max) {
  const json::value* value = Required(name);
  if (value == nullptr) return 0;
  StatusOr<uint64_t> parsed = ParseUint(*value, max);
  if (!parsed.ok()) {
    Fail(name, parsed.status().message());
    return 0;
  }
  return *parsed;
}

int64_t RequestReader::Int(std::string_view name) {
  const json::value* value = Required(name);
  if (value == nullptr) return 0;
  if (const int64_t* i = value->if_int64()) return *i;
  if (const uint64_t* u = value->if_uint64();
      u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(*u);
  }
  Fail(name, value->is_uint64() ? "must be an integer that fits int64" : NotA("an integer", *value).message());
  return 0;
}

bool RequestReader::Bool(std::string_view name) {
  const json::value* value = Required(name);
  if (value == nullptr) return false;
  if (!value->is_bool()) {
    Fail(name, NotA("true or false", *value).message());
    return false;
  }
  return value->get_bool();
}

std::vector<protocol::Key> RequestReader::Keys(std::string_view name, size_t min_items) {
  const json::value* value = Required(name);
  if (value == nullptr) return {};
  ParsedList<protocol::Key> parsed = ParseList<protocol::Key>(*value, min_items, "lowercase hex strings", ParseKey);
  if (const std::optional<ListProblem>& problem = parsed.problem) {
    if (!problem->item) {
      Fail(name, problem->rule);
      return {};
    }
    Fail(std::string(name) + "[" + std::to_string(*problem->item) + "]", problem->rule);
    return {};
  }
  return std::move(parsed.items);
}

std::vector<uint64_t> RequestReader::BlockIds(std::string_view name, size_t min_items) {
  const json::value* value = Required(name);
  if (value == nullptr) return {};
  auto parse = [](const json::value& item) { return ParseUint(item, std::numeric_limits<uint64_t>::max()); };
  ParsedList<uint64_t> parsed = ParseList<uint64_t>(*value, min_items, "integers", parse);
  if (const std::optional<ListProblem>& problem = parsed.problem) {
    if (!problem->item) {
      Fail(name, problem->rule);
      return {};
    }
    const json::value& item = value->get_array()[*problem->item];
    // The engine reads one sentence about the list rather than the item's own rule.
    Fail(name, "must be an array of non-negative integers; item " + std::to_string(*problem->item) + " is " +
                   std::string(JsonKind(item)) + (item.is_int64() ? " below 0" : ""));
    return {};
  }
  return std::move(parsed.items);
}

std::optional<uint64_t> RequestReader::OptionalUint(std::string_view name, uint64_t max) {
  if (Present(name) == nullptr) return std::nullopt;
  const uint64_t parsed = Uint(name, max);
  return status_.ok() ? std::optional<uint64_t>(parsed) : std::nullopt;
}

std::optional<bool> RequestReader::OptionalBool(std::string_view name) {
  if (Present(name) == nullptr) return std::nullopt;
  const bool parsed = Bool(name);
  return status_.ok() ? std::optional<bool>(parsed) : std::nullopt;
}

std::optional<std::string> RequestReader::OptionalString(std::string_view name, size_t min_chars, size_t max_chars) {
  if (Present(name) == nullptr) return std::nullopt;
  std::string parsed = String(name, min_chars, max_chars);
  return status_.ok() ? std::optional<std::string>(std::move(parsed)) : std::nullopt;
}

void RequestReader::SameLength(std::string_view name, size_t size, std::string_view other, size_t other_size) {
  if (!status_.ok() || size == other_size) return;
  Fail(name, "must have as many items as '" + std::string(other) + "' (" + std::to_string(other_size) + "), has " +
                 std::to_string(size));
}

}  // namespace kvpeer::daemon
