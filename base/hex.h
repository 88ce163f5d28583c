// Hexadecimal text for bytes: keys and tokens on the wire, the PSK proof,
// and bytes shown in logs. Output is always lowercase; the wire accepts
// only lowercase (its form is canonical), so DecodeHex does too.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>
#include <string_view>

namespace kvpeer {

// Two lowercase hex digits per byte.
std::string ToHex(std::string_view bytes);

// The same digits written at `out` (room for 2 * bytes.size() chars);
// returns the end. For writers that size their output once.
char* WriteHex(std::string_view bytes, char* out);

// Appends the two lowercase hex digits of `byte` to *out.
void AppendHexByte(unsigned char byte, std::string* out);

// Decodes an even number of lowercase hex digits into *bytes; false (and
// *bytes untouched) for an odd length or any other character.
bool DecodeHex(std::string_view hex, std::string* bytes);

// One pass over `hex` that checks and decodes (keys arrive by the thousand:
// docs/performance.md, "Cheaper keys"): the offset of the first character
// that is not a lowercase hex digit, or npos when there is none; then, for
// an even length, *bytes holds the decoded bytes (otherwise it is
// unspecified).
size_t DecodeLowerHex(std::string_view hex, std::string* bytes);

// 0 ..= 15 for a hex digit of either case, -1 for any other character
// (escapes such as TOML's \uXXXX accept both cases).
int HexDigitValue(char c);

}  // namespace kvpeer
