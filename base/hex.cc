#include "base/hex.h"

namespace kvpeer {
namespace {

constexpr char kDigits[] = "0123456789abcdef";

int LowercaseHexDigitValue(char c) { return c >= 'A' && c <= 'F' ? -1 : HexDigitValue(c); }

}  // namespace

void AppendHexByte(unsigned char byte, std::string* out) {
  out->push_back(kDigits[byte >> 4]);
  out->push_back(kDigits[byte & 0x0F]);
}

std::string ToHex(std::string_view bytes) {
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const char byte : bytes) AppendHexByte(static_cast<unsigned char>(byte), &hex);
  return hex;
}

bool DecodeHex(std::string_view hex, std::string* bytes) {
  if (hex.size() % 2 != 0) return false;
  std::string decoded(hex.size() / 2, '\0');
  for (size_t i = 0; i < decoded.size(); ++i) {
    const int high = LowercaseHexDigitValue(hex[2 * i]);
    const int low = LowercaseHexDigitValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    decoded[i] = static_cast<char>((high << 4) | low);
  }
  *bytes = std::move(decoded);
  return true;
}

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace kvpeer
