#include "config/toml_subset.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "base/hex.h"

namespace kvpeer::config {
namespace {

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

bool IsBareValueChar(char c) { return IsKeyChar(c) || c == '+' || c == '.' || c == ':'; }

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  }
}

// Recursive-descent reader over the whole text; errors carry the line.
class Reader {
 public:
  Reader(std::string_view text, const std::set<std::string, std::less<>>& known_keys)
      : text_(text), known_keys_(known_keys) {}

  StatusOr<std::vector<TomlEntry>> ReadDocument() {
    std::vector<TomlEntry> entries;
    for (;;) {
      SkipSpaceAndComments(/*newlines=*/true);
      if (AtEnd()) return entries;
      StatusOr<TomlEntry> entry = ReadEntry();
      if (!entry.ok()) return entry.status();
      if (Status status = CheckKey(*entry, entries); !status.ok()) return status;
      entries.push_back(std::move(entry).value());
    }
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  bool LookingAt(std::string_view s) const { return text_.substr(pos_).starts_with(s); }

  void Advance() {
    if (text_[pos_] == '\n') ++line_;
    ++pos_;
  }

  Status Error(const std::string& what) const { return ErrorAt(line_, what); }
  static Status ErrorAt(int line, const std::string& what) {
    return Status::Invalid("line " + std::to_string(line) + ": " + what);
  }

  void SkipSpaceAndComments(bool newlines) {
    while (!AtEnd()) {
      char c = Peek();
      if (c == '#') {
        while (!AtEnd() && Peek() != '\n') Advance();
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        Advance();
      } else {
        return;
      }
    }
  }

  StatusOr<TomlEntry> ReadEntry() {
    if (Peek() == '[') return Error("tables ([section]) are not supported; write every key at the top level");
    TomlEntry entry;
    entry.line = line_;
    while (IsKeyChar(Peek())) entry.key.push_back(text_[pos_++]);
    if (entry.key.empty()) return Error("expected a key (a kvpeerd flag name without the leading dashes)");
    SkipSpaceAndComments(false);
    if (Peek() == '.') return Error("dotted keys such as '" + entry.key + ".x' are not supported");
    if (Peek() != '=') return Error("expected '=' after '" + entry.key + "'");
    Advance();
    SkipSpaceAndComments(false);
    entry.is_array = Peek() == '[';
    StatusOr<std::vector<std::string>> values = ReadValue(entry);
    if (!values.ok()) return values.status();
    entry.values = std::move(values).value();
    SkipSpaceAndComments(false);
    if (!AtEnd() && Peek() != '\n') return Error("unexpected text after the value of '" + entry.key + "'");
    return entry;
  }

  Status CheckKey(const TomlEntry& entry, const std::vector<TomlEntry>& earlier) const {
    if (known_keys_.find(entry.key) == known_keys_.end()) {
      std::string known;
      for (const std::string& key : known_keys_) known += (known.empty() ? "" : ", ") + key;
      return ErrorAt(entry.line, "unknown key '" + entry.key + "' (known keys: " + known + ")");
    }
    auto same = [&](const TomlEntry& e) { return e.key == entry.key; };
    auto first = std::find_if(earlier.begin(), earlier.end(), same);
    if (first != earlier.end()) {
      return ErrorAt(entry.line, "key '" + entry.key + "' is already set on line " + std::to_string(first->line));
    }
    return Status::Ok();
  }

  // The value's items: one for a scalar, any number for an array.
  StatusOr<std::vector<std::string>> ReadValue(const TomlEntry& entry) {
    if (Peek() == '[') return ReadArray(entry);
    if (Peek() == '{') return Error("inline tables are not supported (value of '" + entry.key + "')");
    StatusOr<std::string> value = ReadScalar(entry.key);
    if (!value.ok()) return value.status();
    return std::vector<std::string>{std::move(value).value()};
  }

  StatusOr<std::vector<std::string>> ReadArray(const TomlEntry& entry) {
    Advance();  // '['
    // An unclosed array swallows the rest of the file; report where it began.
    Status unclosed = ErrorAt(entry.line, "the array of '" + entry.key + "' has no closing ']'");
    std::vector<std::string> values;
    for (;;) {
      SkipSpaceAndComments(true);
      if (AtEnd()) return unclosed;
      if (Peek() == ']') break;
      if (Peek() == '[') return Error("nested arrays are not supported (value of '" + entry.key + "')");
      StatusOr<std::string> value = ReadScalar(entry.key);
      if (!value.ok()) return value.status();
      values.push_back(std::move(value).value());
      SkipSpaceAndComments(true);
      if (AtEnd()) return unclosed;
      if (Peek() == ',') {
        Advance();
      } else if (Peek() != ']') {
        return Error("expected ',' or ']' in the array of '" + entry.key + "'");
      }
    }
    Advance();  // ']'
    return values;
  }

  StatusOr<std::string> ReadScalar(const std::string& key) {
    if (LookingAt("\"\"\"") || LookingAt("'''"))
      return Error("multi-line strings are not supported (value of '" + key + "')");
    if (Peek() == '"') return ReadBasicString(key);
    if (Peek() == '\'') return ReadLiteralString(key);
    return ReadBareValue(key);
  }

  StatusOr<std::string> ReadLiteralString(const std::string& key) {
    Advance();
    std::string value;
    while (!AtEnd() && Peek() != '\'' && Peek() != '\n') value.push_back(text_[pos_++]);
    if (Peek() != '\'') return Error("the string value of '" + key + "' has no closing quote");
    Advance();
    return value;
  }

  StatusOr<std::string> ReadBasicString(const std::string& key) {
    Advance();
    std::string value;
    while (!AtEnd() && Peek() != '"' && Peek() != '\n') {
      if (Peek() != '\\') {
        value.push_back(text_[pos_++]);
        continue;
      }
      StatusOr<std::string> escaped = ReadEscape(key);
      if (!escaped.ok()) return escaped.status();
      value += *escaped;
    }
    if (Peek() != '"') return Error("the string value of '" + key + "' has no closing quote");
    Advance();
    return value;
  }

  // The bytes one escape sequence stands for.
  StatusOr<std::string> ReadEscape(const std::string& key) {
    ++pos_;  // '\'
    if (AtEnd() || Peek() == '\n') return Error("the string value of '" + key + "' has no closing quote");
    char c = text_[pos_++];
    switch (c) {
      case '"':
        return std::string("\"");
      case '\\':
        return std::string("\\");
      case 'b':
        return std::string("\b");
      case 'f':
        return std::string("\f");
      case 'n':
        return std::string("\n");
      case 'r':
        return std::string("\r");
      case 't':
        return std::string("\t");
      case 'u':
        return ReadUnicodeEscape(key, 4);
      case 'U':
        return ReadUnicodeEscape(key, 8);
      default:
        return Error("invalid escape '\\" + std::string(1, c) + "' in the value of '" + key + "'");
    }
  }

  StatusOr<std::string> ReadUnicodeEscape(const std::string& key, size_t digits) {
    std::string_view hex = text_.substr(pos_, digits);
    uint32_t code_point = 0;
    for (char c : hex) {
      int digit = HexDigitValue(c);
      if (digit < 0) return Error("invalid unicode escape in the value of '" + key + "'");
      code_point = code_point * 16 + static_cast<uint32_t>(digit);
    }
    bool scalar = code_point < 0xd800 || (code_point > 0xdfff && code_point <= 0x10ffff);
    if (hex.size() != digits || !scalar) return Error("invalid unicode escape in the value of '" + key + "'");
    pos_ += digits;
    std::string value;
    AppendUtf8(code_point, &value);
    return value;
  }

  // Numbers and booleans are kept as text; the option's validator decides
  // whether "30", "-1" or "1.5" is acceptable and says why not.
  StatusOr<std::string> ReadBareValue(const std::string& key) {
    std::string value;
    while (IsBareValueChar(Peek())) value.push_back(text_[pos_++]);
    bool is_bool = value == "true" || value == "false";
    char first = value.empty() ? '\0' : value[0];
    bool is_number = (first >= '0' && first <= '9') || first == '-' || first == '+';
    if (!is_bool && !is_number) {
      return Error("the value of '" + key + "' must be a quoted string (\"...\"), a number, true/false or an array");
    }
    if (is_number && value.find(':') != std::string::npos) {
      return Error("the value of '" + key + "' must be quoted (\"" + value + "\")");
    }
    std::erase(value, '_');  // TOML digit separators: 67_108_864
    return value;
  }

  std::string_view text_;
  const std::set<std::string, std::less<>>& known_keys_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

StatusOr<std::vector<TomlEntry>> ParseTomlSubset(std::string_view text,
                                                 const std::set<std::string, std::less<>>& known_keys) {
  return Reader(text, known_keys).ReadDocument();
}

}  // namespace kvpeer::config
