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

  Status ReadDocument(std::vector<TomlEntry>* entries) {
    for (;;) {
      SkipSpaceAndComments(/*newlines=*/true);
      if (AtEnd()) return Status::Ok();
      TomlEntry entry;
      Status status = ReadEntry(&entry);
      if (status.ok()) status = CheckKey(entry, *entries);
      if (!status.ok()) return status;
      entries->push_back(std::move(entry));
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

  Status ReadEntry(TomlEntry* entry) {
    if (Peek() == '[') return Error("tables ([section]) are not supported; write every key at the top level");
    entry->line = line_;
    while (IsKeyChar(Peek())) entry->key.push_back(text_[pos_++]);
    if (entry->key.empty()) return Error("expected a key (a kvpeerd flag name without the leading dashes)");
    SkipSpaceAndComments(false);
    if (Peek() == '.') return Error("dotted keys such as '" + entry->key + ".x' are not supported");
    if (Peek() != '=') return Error("expected '=' after '" + entry->key + "'");
    Advance();
    SkipSpaceAndComments(false);
    Status status = ReadValue(entry);
    if (!status.ok()) return status;
    SkipSpaceAndComments(false);
    if (!AtEnd() && Peek() != '\n') return Error("unexpected text after the value of '" + entry->key + "'");
    return Status::Ok();
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

  Status ReadValue(TomlEntry* entry) {
    if (Peek() == '[') {
      entry->is_array = true;
      return ReadArray(entry);
    }
    if (Peek() == '{') return Error("inline tables are not supported (value of '" + entry->key + "')");
    std::string value;
    Status status = ReadScalar(entry->key, &value);
    if (status.ok()) entry->values.push_back(std::move(value));
    return status;
  }

  Status ReadArray(TomlEntry* entry) {
    Advance();  // '['
    // An unclosed array swallows the rest of the file; report where it began.
    Status unclosed = ErrorAt(entry->line, "the array of '" + entry->key + "' has no closing ']'");
    for (;;) {
      SkipSpaceAndComments(true);
      if (AtEnd()) return unclosed;
      if (Peek() == ']') break;
      if (Peek() == '[') return Error("nested arrays are not supported (value of '" + entry->key + "')");
      std::string value;
      Status status = ReadScalar(entry->key, &value);
      if (!status.ok()) return status;
      entry->values.push_back(std::move(value));
      SkipSpaceAndComments(true);
      if (AtEnd()) return unclosed;
      if (Peek() == ',') {
        Advance();
      } else if (Peek() != ']') {
        return Error("expected ',' or ']' in the array of '" + entry->key + "'");
      }
    }
    Advance();  // ']'
    return Status::Ok();
  }

  Status ReadScalar(const std::string& key, std::string* value) {
    if (LookingAt("\"\"\"") || LookingAt("'''"))
      return Error("multi-line strings are not supported (value of '" + key + "')");
    if (Peek() == '"') return ReadBasicString(key, value);
    if (Peek() == '\'') return ReadLiteralString(key, value);
    return ReadBareValue(key, value);
  }

  Status ReadLiteralString(const std::string& key, std::string* value) {
    Advance();
    while (!AtEnd() && Peek() != '\'' && Peek() != '\n') value->push_back(text_[pos_++]);
    if (Peek() != '\'') return Error("the string value of '" + key + "' has no closing quote");
    Advance();
    return Status::Ok();
  }

  Status ReadBasicString(const std::string& key, std::string* value) {
    Advance();
    while (!AtEnd() && Peek() != '"' && Peek() != '\n') {
      if (Peek() != '\\') {
        value->push_back(text_[pos_++]);
        continue;
      }
      Status status = ReadEscape(key, value);
      if (!status.ok()) return status;
    }
    if (Peek() != '"') return Error("the string value of '" + key + "' has no closing quote");
    Advance();
    return Status::Ok();
  }

  Status ReadEscape(const std::string& key, std::string* value) {
    ++pos_;  // '\'
    if (AtEnd() || Peek() == '\n') return Error("the string value of '" + key + "' has no closing quote");
    char c = text_[pos_++];
    switch (c) {
      case '"':
        value->push_back('"');
        return Status::Ok();
      case '\\':
        value->push_back('\\');
        return Status::Ok();
      case 'b':
        value->push_back('\b');
        return Status::Ok();
      case 'f':
        value->push_back('\f');
        return Status::Ok();
      case 'n':
        value->push_back('\n');
        return Status::Ok();
      case 'r':
        value->push_back('\r');
        return Status::Ok();
      case 't':
        value->push_back('\t');
        return Status::Ok();
      case 'u':
        return ReadUnicodeEscape(key, 4, value);
      case 'U':
        return ReadUnicodeEscape(key, 8, value);
      default:
        return Error("invalid escape '\\" + std::string(1, c) + "' in the value of '" + key + "'");
    }
  }

  Status ReadUnicodeEscape(const std::string& key, size_t digits, std::string* value) {
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
    AppendUtf8(code_point, value);
    return Status::Ok();
  }

  // Numbers and booleans are kept as text; the option's validator decides
  // whether "30", "-1" or "1.5" is acceptable and says why not.
  Status ReadBareValue(const std::string& key, std::string* value) {
    while (IsBareValueChar(Peek())) value->push_back(text_[pos_++]);
    bool is_bool = *value == "true" || *value == "false";
    char first = value->empty() ? '\0' : (*value)[0];
    bool is_number = (first >= '0' && first <= '9') || first == '-' || first == '+';
    if (!is_bool && !is_number) {
      return Error("the value of '" + key + "' must be a quoted string (\"...\"), a number, true/false or an array");
    }
    if (is_number && value->find(':') != std::string::npos) {
      return Error("the value of '" + key + "' must be quoted (\"" + *value + "\")");
    }
    std::erase(*value, '_');  // TOML digit separators: 67_108_864
    return Status::Ok();
  }

  std::string_view text_;
  const std::set<std::string, std::less<>>& known_keys_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

StatusOr<std::vector<TomlEntry>> ParseTomlSubset(std::string_view text,
                                                 const std::set<std::string, std::less<>>& known_keys) {
  std::vector<TomlEntry> entries;
  if (Status status = Reader(text, known_keys).ReadDocument(&entries); !status.ok()) return status;
  return entries;
}

}  // namespace kvpeer::config
