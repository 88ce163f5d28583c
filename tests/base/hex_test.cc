#include "base/hex.h"

#include <catch2/catch.hpp>
#include <string>

namespace kvpeer {
namespace {

TEST_CASE("ToHex writes two lowercase digits per byte", "[hex]") {
  CHECK(ToHex("") == "");
  CHECK(ToHex(std::string("\x00\x0f\xa0\xff", 4)) == "000fa0ff");
}

TEST_CASE("DecodeHex accepts lowercase even-length hex", "[hex]") {
  std::string bytes;
  REQUIRE(DecodeHex("000fa0ff", &bytes));
  CHECK(bytes == std::string("\x00\x0f\xa0\xff", 4));
  REQUIRE(DecodeHex("", &bytes));
  CHECK(bytes.empty());
}

TEST_CASE("DecodeHex rejects odd length, uppercase and non-hex characters", "[hex]") {
  std::string bytes;
  CHECK_FALSE(DecodeHex("abc", &bytes));
  CHECK_FALSE(DecodeHex("AB", &bytes));
  CHECK_FALSE(DecodeHex("aB", &bytes));
  CHECK_FALSE(DecodeHex("0g", &bytes));
  CHECK_FALSE(DecodeHex("0x", &bytes));
  CHECK_FALSE(DecodeHex(" 0", &bytes));
  CHECK_FALSE(DecodeHex(std::string("0\0", 2), &bytes));
}

TEST_CASE("AppendHexByte appends two lowercase digits", "[hex]") {
  std::string out = "x";
  AppendHexByte(0x00, &out);
  AppendHexByte(0xab, &out);
  AppendHexByte(0xff, &out);
  CHECK(out == "x00abff");
}

TEST_CASE("HexDigitValue reads either case and rejects the rest", "[hex]") {
  CHECK(HexDigitValue('0') == 0);
  CHECK(HexDigitValue('9') == 9);
  CHECK(HexDigitValue('a') == 10);
  CHECK(HexDigitValue('F') == 15);
  CHECK(HexDigitValue('g') == -1);
  CHECK(HexDigitValue('G') == -1);
  CHECK(HexDigitValue(' ') == -1);
  CHECK(HexDigitValue('\0') == -1);
}

TEST_CASE("DecodeHex leaves its output untouched on failure", "[hex]") {
  std::string bytes = "kept";
  CHECK_FALSE(DecodeHex("zz", &bytes));
  CHECK(bytes == "kept");
}

}  // namespace
TEST_CASE("DecodeLowerHex checks and decodes in one pass, naming the first bad offset", "[hex]") {
  std::string out;
  CHECK(DecodeLowerHex("00ff7a", &out) == std::string_view::npos);
  CHECK(out == std::string("\x00\xff\x7a", 3));
  CHECK(DecodeLowerHex("0g", &out) == 1);
  CHECK(DecodeLowerHex("G0", &out) == 0);
  CHECK(DecodeLowerHex("abAB", &out) == 2);
  CHECK(DecodeLowerHex("ab c", &out) == 2);
  CHECK(DecodeLowerHex("abc", &out) == std::string_view::npos);  // odd but all digits: the caller checks length
  CHECK(DecodeLowerHex("abx", &out) == 2);
  CHECK(DecodeLowerHex("", &out) == std::string_view::npos);
  CHECK(out.empty());
  // Every byte value round-trips through ToHex.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  REQUIRE(DecodeLowerHex(ToHex(all), &out) == std::string_view::npos);
  CHECK(out == all);
}

}  // namespace kvpeer
