#include "protocol/json_fields.h"

#include <cstdio>

#include <algorithm>
#include <utility>

#include "base/hex.h"
#include "protocol/codec.h"
#include "protocol/peer_id.h"

namespace kvpeer::protocol {
namespace {

namespace json = boost::json;

// The parsers below return the rule a value broke as a failed Status
// (kViolation: the value came from the peer), or an ok Status when it passed.
// They only know the value; the FieldReader adds the field's name.
Status Broke(std::string rule) { return Status::Violation(std::move(rule)); }

std::string Range(uint64_t min, uint64_t max) { return std::to_string(min) + " ..= " + std::to_string(max); }

bool IsLowerHexDigit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// Offset of the first byte that is not a lowercase hex digit, or npos.
size_t FindNonHexDigit(std::string_view text) {
  auto it = std::find_if_not(text.begin(), text.end(), IsLowerHexDigit);
  return it == text.end() ? std::string_view::npos : static_cast<size_t>(it - text.begin());
}

Status NotA(std::string_view wanted, const json::value& value) {
  return Broke("must be " + std::string(wanted) + ", not " + std::string(JsonKindName(value)));
}

Status ParseString(const json::value& value, StringRule rule, std::string* out) {
  const json::string* text = value.if_string();
  if (text == nullptr) return NotA("a string", value);
  const size_t chars = CountCodePoints(*text);
  if (chars < rule.min_chars || chars > rule.max_chars) {
    return Broke("must be " + Range(rule.min_chars, rule.max_chars) + " characters long, has " + std::to_string(chars));
  }
  if (!rule.controls_allowed) {
    if (Status problem = ControlCharacterProblem(*text); !problem.ok()) return Broke(problem.message());
  }
  out->assign(text->data(), text->size());
  return Status::Ok();
}

Status ParseInteger(const json::value& value, IntegerRule rule, uint64_t* out) {
  const std::string wanted = "must be an integer in " + Range(rule.min, rule.max);
  uint64_t number = 0;
  switch (CheckInteger(value, rule, &number)) {
    case IntegerVerdict::kOk:
      *out = number;
      return Status::Ok();
    case IntegerVerdict::kNotAnInteger:
      return NotA("an integer", value);
    case IntegerVerdict::kFractional:
      return Broke(wanted + " written without fraction or exponent");
    case IntegerVerdict::kNegative:
      return Broke(wanted + ", is " + std::to_string(value.get_int64()));
    case IntegerVerdict::kOutOfRange:
      return Broke(wanted + ", is " + std::to_string(number));
  }
  return NotA("an integer", value);
}

Status ParseBool(const json::value& value, bool* out) {
  const bool* flag = value.if_bool();
  if (flag == nullptr) return NotA("a bool (true or false)", value);
  *out = *flag;
  return Status::Ok();
}

Status ParseToken(const json::value& value, TokenRule rule, std::string* out) {
  const std::string wanted = std::to_string(kTokenHexDigits) + " lowercase hex digits";
  const json::string* text = value.if_string();
  if (text == nullptr) return NotA("a string of " + wanted, value);
  if (text->size() != kTokenHexDigits) {
    return Broke("must be " + wanted + ", has " + std::to_string(CountCodePoints(*text)) + " characters");
  }
  if (size_t bad = FindNonHexDigit(*text); bad != std::string_view::npos) {
    return Broke("must be " + wanted + "; the character at offset " + std::to_string(bad) + " is not 0-9 or a-f");
  }
  if (rule == TokenRule::kNotAllZeros && text->find_first_not_of('0') == json::string::npos) {
    return Broke("must not be all zeros");
  }
  out->assign(text->data(), text->size());
  return Status::Ok();
}

Status ParseKey(const json::value& value, Key* out) {
  constexpr std::string_view kHexRule = "must be lowercase hex with an even number of digits";
  const KeyCheck check = CheckKey(value, out);
  switch (check.verdict) {
    case KeyVerdict::kOk:
      return Status::Ok();
    case KeyVerdict::kNotAString:
      break;
    case KeyVerdict::kBadLength:
      return Broke("must be 2 ..= " + std::to_string(2 * kMaxKeyBytes) + " hex digits (1 ..= " +
                   std::to_string(kMaxKeyBytes) + " bytes), has " + std::to_string(value.get_string().size()));
    case KeyVerdict::kNotHex:
      return Broke(std::string(kHexRule) + "; the character at offset " + std::to_string(check.bad_offset) +
                   " is not 0-9 or a-f");
    case KeyVerdict::kOddDigits:
      return Broke(std::string(kHexRule) + ", has " + std::to_string(value.get_string().size()) + " digits");
  }
  return NotA("a string of lowercase hex digits", value);
}

Status ParsePeerId(const json::value& value, std::string* out) {
  const json::string* text = value.if_string();
  if (text == nullptr) return NotA("a string", value);
  const std::string_view view(text->data(), text->size());
  if (Status broken = PeerIdSyntaxError(view); !broken.ok()) return Broke(broken.message());
  out->assign(view);
  return Status::Ok();
}

Status ParseBlockIndex(const json::value& value, SlotIndex* out) {
  uint64_t index = 0;
  if (Status broken = ParseInteger(value, IntegerRule{0, kMaxSlotIndex}, &index); !broken.ok()) return broken;
  *out = static_cast<SlotIndex>(index);
  return Status::Ok();
}

Status ParseChecksum(const json::value& value, uint64_t* out) {
  const json::string* text = value.if_string();
  if (text == nullptr) return NotA("a string", value);
  if (text->size() != kChecksumHexDigits || FindNonHexDigit(*text) != std::string_view::npos) {
    return Broke("must be " + std::to_string(kChecksumHexDigits) + " lowercase hex digits");
  }
  *out = std::stoull(std::string(text->data(), text->size()), nullptr, 16);
  return Status::Ok();
}

}  // namespace

std::string_view JsonKindName(const json::value& value) {
  switch (value.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a bool";
    case json::kind::int64:
    case json::kind::uint64:
      return "an integer";
    case json::kind::double_:
      return "a floating-point number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "an unknown JSON value";
}

FieldReader::FieldReader(const json::object& header, std::string_view message_type)
    : header_(header), message_type_(message_type) {}

void FieldReader::Fail(std::string_view name, const std::string& rule) {
  if (!status_.ok()) return;  // the first failure is the one reported
  status_ = Status::FieldViolation(message_type_ + "." + std::string(name), rule);
}

const json::value* FieldReader::FindRequired(std::string_view name) {
  if (!status_.ok()) return nullptr;
  const json::value* value = header_.if_contains(name);
  if (value == nullptr) Fail(name, "is required");
  return value;
}

template <typename T, typename Parse>
void FieldReader::ReadOne(std::string_view name, Parse parse, T* out) {
  const json::value* value = FindRequired(name);
  if (value == nullptr) return;
  if (Status broken = parse(*value, out); !broken.ok()) Fail(name, broken.message());
}

template <typename T, typename Parse>
void FieldReader::ReadList(std::string_view name, size_t min_items, size_t max_items, Parse parse,
                           std::vector<T>* out) {
  const json::value* value = FindRequired(name);
  if (value == nullptr) return;
  const json::array* items = value->if_array();
  if (items == nullptr) return Fail(name, NotA("an array", *value).message());
  if (items->size() < min_items || items->size() > max_items) {
    return Fail(name, "must have " + Range(min_items, max_items) + " elements, has " + std::to_string(items->size()));
  }
  out->clear();
  out->reserve(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    T item{};
    if (Status broken = parse((*items)[i], &item); !broken.ok()) {
      return Fail(std::string(name) + "[" + std::to_string(i) + "]", broken.message());
    }
    out->push_back(std::move(item));
  }
}

void FieldReader::ReadString(std::string_view name, StringRule rule, std::string* out) {
  ReadOne(
      name, [rule](const json::value& v, std::string* o) { return ParseString(v, rule, o); }, out);
}

void FieldReader::ReadInteger(std::string_view name, IntegerRule rule, uint64_t* out) {
  ReadOne(
      name, [rule](const json::value& v, uint64_t* o) { return ParseInteger(v, rule, o); }, out);
}

void FieldReader::ReadBool(std::string_view name, bool* out) { ReadOne(name, ParseBool, out); }

void FieldReader::ReadToken(std::string_view name, TokenRule rule, std::string* out) {
  ReadOne(
      name, [rule](const json::value& v, std::string* o) { return ParseToken(v, rule, o); }, out);
}

void FieldReader::ReadKeys(std::string_view name, std::vector<Key>* out) {
  ReadList(name, 0, kMaxListItems, ParseKey, out);
}

void FieldReader::ReadSlotIndexes(std::string_view name, size_t min_items, std::vector<SlotIndex>* out) {
  ReadList(name, min_items, kMaxListItems, ParseBlockIndex, out);
}

void FieldReader::ReadBools(std::string_view name, std::vector<bool>* out) {
  ReadList(name, 0, kMaxListItems, ParseBool, out);
}

void FieldReader::ReadPeerId(std::string_view name, std::string* out) { ReadOne(name, ParsePeerId, out); }

void FieldReader::ReadOptionalStrings(std::string_view name, size_t max_items, StringRule rule,
                                      std::vector<std::string>* out) {
  out->clear();
  if (!status_.ok() || !header_.contains(name)) return;
  ReadList(
      name, 0, max_items, [rule](const json::value& v, std::string* o) { return ParseString(v, rule, o); }, out);
}

void FieldReader::ReadOptionalString(std::string_view name, StringRule rule, std::optional<std::string>* out) {
  out->reset();
  if (!status_.ok()) return;
  const json::value* value = header_.if_contains(name);
  if (value == nullptr) return;
  std::string text;
  if (Status broken = ParseString(*value, rule, &text); !broken.ok()) return Fail(name, broken.message());
  *out = std::move(text);
}

void FieldReader::ReadOptionalChecksums(std::string_view name, size_t expected_items, BlockChecksums* out) const {
  *out = BlockChecksums{};
  const json::value* value = header_.if_contains(name);
  if (value == nullptr) return;
  auto malformed = [&](std::string field, const std::string& rule) {
    *out = BlockChecksums{BlockChecksums::State::kMalformed, {}, std::move(field) + ": " + rule};
  };
  const json::array* items = value->if_array();
  if (items == nullptr) return malformed(std::string(name), NotA("an array", *value).message());
  if (items->size() != expected_items) {
    return malformed(std::string(name), "must have one element per block (" + std::to_string(expected_items) +
                                            "), has " + std::to_string(items->size()));
  }
  std::vector<uint64_t> values(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    if (Status broken = ParseChecksum((*items)[i], &values[i]); !broken.ok()) {
      return malformed(std::string(name) + "[" + std::to_string(i) + "]", broken.message());
    }
  }
  *out = BlockChecksums::Of(std::move(values));
}

void FieldReader::RequireSameLength(std::string_view name, size_t size, std::string_view other, size_t other_size) {
  if (!status_.ok() || size == other_size) return;
  Fail(name, "must have as many elements as " + std::string(other) + " (" + std::to_string(other_size) + "), has " +
                 std::to_string(size));
}

// Boost.JSON has already rejected invalid UTF-8, so every code point has
// exactly one byte that is not a continuation byte (10xxxxxx).
size_t CountCodePoints(std::string_view utf8) {
  return static_cast<size_t>(
      std::count_if(utf8.begin(), utf8.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

IntegerVerdict CheckInteger(const json::value& value, IntegerRule rule, uint64_t* out) {
  if (const int64_t* signed_number = value.if_int64(); signed_number != nullptr && *signed_number < 0) {
    return IntegerVerdict::kNegative;
  }
  if (const uint64_t* unsigned_number = value.if_uint64()) {
    *out = *unsigned_number;
  } else if (const int64_t* signed_number = value.if_int64()) {
    *out = static_cast<uint64_t>(*signed_number);
  } else if (value.is_double()) {
    // Boost.JSON also yields a double for an integer beyond uint64.
    return IntegerVerdict::kFractional;
  } else {
    return IntegerVerdict::kNotAnInteger;
  }
  return *out < rule.min || *out > rule.max ? IntegerVerdict::kOutOfRange : IntegerVerdict::kOk;
}

KeyCheck CheckKey(const json::value& value, Key* out) {
  const json::string* text = value.if_string();
  if (text == nullptr) return {KeyVerdict::kNotAString};
  if (text->empty() || text->size() > 2 * kMaxKeyBytes) return {KeyVerdict::kBadLength};
  // Checked and decoded in one pass: a request may carry 65,536 keys.
  if (size_t bad = DecodeLowerHex(*text, out); bad != std::string_view::npos) return {KeyVerdict::kNotHex, bad};
  if (text->size() % 2 != 0) return {KeyVerdict::kOddDigits};
  return {KeyVerdict::kOk};
}

Status ControlCharacterProblem(std::string_view text) {
  // Control characters are single bytes in UTF-8 (and never part of a
  // multi-byte sequence), so bytes can be scanned; the position reported is
  // the character's, as people count them.
  size_t position = 0;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte & 0xC0) != 0x80) ++position;  // the first byte of a character
    if (byte > 0x1F && byte != 0x7F) continue;
    char code[8];
    std::snprintf(code, sizeof(code), "U+%04X", byte);
    return Status::Invalid("must not contain control characters (U+0000 ..= U+001F, U+007F); character " +
                           std::to_string(position) + " is " + code);
  }
  return Status::Ok();
}

}  // namespace kvpeer::protocol
