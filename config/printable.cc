#include "config/printable.h"

#include "base/hex.h"

namespace kvpeer::config {

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\\') {
      out += "\\\\";
    } else if (byte < 0x20 || byte >= 0x7f) {
      out += "\\x";
      AppendHexByte(byte, &out);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace kvpeer::config
