#include "base/hex.h"

#include <array>
#include <cstdint>

namespace kvpeer {
namespace {

constexpr char kDigits[] = "0123456789abcdef";

int LowercaseHexDigitValue(char c) { return c >= 'A' && c <= 'F' ? -1 : HexDigitValue(c); }

// The value of each byte as a lowercase hex digit, or 0xFF.
constexpr std::array<uint8_t, 256> MakeDigitTable() {
  std::array<uint8_t, 256> table{};
  for (auto& value : table) value = 0xFF;
  for (int c = '0'; c <= '9'; ++c) table[static_cast<size_t>(c)] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) table[static_cast<size_t>(c)] = static_cast<uint8_t>(c - 'a' + 10);
  return table;
}
constexpr std::array<uint8_t, 256> kDigitValue = MakeDigitTable();

uint8_t DigitOf(char c) { return kDigitValue[static_cast<unsigned char>(c)]; }

}  // namespace

void AppendHexByte(unsigned char byte, std::string* out) {
  out->push_back(kDigits[byte >> 4]);
  out->push_back(kDigits[byte & 0x0F]);
}

char* WriteHex(std::string_view bytes, char* out) {
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    *out++ = kDigits[byte >> 4];
    *out++ = kDigits[byte & 0x0F];
  }
  return out;
}

std::string ToHex(std::string_view bytes) {
  std::string hex(bytes.size() * 2, '\0');
  WriteHex(bytes, hex.data());
  return hex;
}

size_t DecodeLowerHex(std::string_view hex, std::string* bytes) {
  bytes->resize(hex.size() / 2);
  char* out = bytes->data();
  const size_t pairs = hex.size() / 2;
  for (size_t i = 0; i < pairs; ++i) {
    const uint8_t high = DigitOf(hex[2 * i]);
    const uint8_t low = DigitOf(hex[2 * i + 1]);
    if ((high | low) > 0x0F) return 2 * i + (high > 0x0F ? 0 : 1);
    out[i] = static_cast<char>((high << 4) | low);
  }
  if (hex.size() % 2 != 0 && DigitOf(hex.back()) > 0x0F) return hex.size() - 1;
  return std::string_view::npos;
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
