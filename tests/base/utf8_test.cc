#include "base/utf8.h"

#include <catch2/catch.hpp>
#include <string>

namespace kvpeer {
namespace {

TEST_CASE("Utf8Prefix keeps text that fits whole") {
  CHECK(Utf8Prefix("", 0).empty());
  CHECK(Utf8Prefix("abc", 3) == "abc");
  CHECK(Utf8Prefix("h\xc3\xa9", 8) == "h\xc3\xa9");
}

TEST_CASE("Utf8Prefix cuts ASCII at the bound") {
  CHECK(Utf8Prefix("abcdef", 4) == "abcd");
  CHECK(Utf8Prefix("abcdef", 0).empty());
}

TEST_CASE("Utf8Prefix never splits a multi-byte character") {
  const std::string e_acute = "\xc3\xa9";        // 2 bytes
  const std::string euro = "\xe2\x82\xac";       // 3 bytes
  const std::string emoji = "\xf0\x9f\x98\x80";  // 4 bytes
  CHECK(Utf8Prefix("a" + e_acute, 2) == "a");    // would end inside é
  CHECK(Utf8Prefix("a" + e_acute + "b", 3) == "a" + e_acute);
  CHECK(Utf8Prefix(euro + euro, 5) == euro);
  CHECK(Utf8Prefix(emoji, 3).empty());
  CHECK(Utf8Prefix("xy" + emoji, 5) == "xy");
  CHECK(Utf8Prefix("xy" + emoji, 6) == "xy" + emoji);
}

TEST_CASE("Utf8Prefix stays within the bound for bytes that are not UTF-8") {
  const std::string continuation_only(10, '\x80');
  CHECK(Utf8Prefix(continuation_only, 4).empty());
  CHECK(Utf8Prefix(std::string("\xff\xff\xff", 3), 2) == std::string("\xff\xff", 2));
}

}  // namespace
}  // namespace kvpeer
