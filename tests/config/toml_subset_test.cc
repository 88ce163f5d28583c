#include "config/toml_subset.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace kvpeer::config {
namespace {

const std::set<std::string, std::less<>> kKeys = {"a", "b", "list", "name-with-dash"};

std::vector<TomlEntry> MustParse(const std::string& text) {
  StatusOr<std::vector<TomlEntry>> entries = ParseTomlSubset(text, kKeys);
  INFO(entries.status().message());
  REQUIRE(entries.ok());
  return *entries;
}

std::string ParseError(const std::string& text) {
  StatusOr<std::vector<TomlEntry>> entries = ParseTomlSubset(text, kKeys);
  CHECK_FALSE(entries.ok());
  return entries.status().message();
}

TEST_CASE("scalars: strings, numbers, booleans") {
  auto entries = MustParse("a = \"x y\" # c\nb=42\nname-with-dash = true\n");
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].key == "a");
  CHECK(entries[0].values == std::vector<std::string>{"x y"});
  CHECK_FALSE(entries[0].is_array);
  CHECK(entries[1].values == std::vector<std::string>{"42"});
  CHECK(entries[1].line == 2);
  CHECK(entries[2].values == std::vector<std::string>{"true"});
}

TEST_CASE("numbers are kept as text for the option to judge") {
  CHECK(MustParse("a = -1")[0].values[0] == "-1");
  CHECK(MustParse("a = 1.5")[0].values[0] == "1.5");
  CHECK(MustParse("a = 67_108_864")[0].values[0] == "67108864");
}

TEST_CASE("basic string escapes and literal strings") {
  CHECK(MustParse(R"(a = "q\"b\\t\t#")")[0].values[0] == "q\"b\\t\t#");
  CHECK(MustParse(R"(a = "\u00e9\U0001F600")")[0].values[0] == "\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(MustParse(R"(a = 'C:\path#1')")[0].values[0] == "C:\\path#1");
  CHECK(MustParse("a = \"\"")[0].values[0].empty());
  CHECK(MustParse("a = ''")[0].values == std::vector<std::string>{""});
}

TEST_CASE("arrays, single and multi-line, with comments and a trailing comma") {
  CHECK(MustParse("list = []")[0].values.empty());
  CHECK(MustParse("list = []")[0].is_array);
  auto entries = MustParse("list = [\n  \"x\", # first\n  'y',\n  3,\n]\nb = 1\n");
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].values == std::vector<std::string>{"x", "y", "3"});
  CHECK(entries[1].line == 6);
}

TEST_CASE("CRLF line endings and blank lines") {
  auto entries = MustParse("\r\n# c\r\na = \"x\"\r\n\r\nb = 2\r\n");
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].values[0] == "x");
  CHECK(entries[1].line == 5);
}

TEST_CASE("errors say the line and what was expected") {
  CHECK(ParseError("a = 1\nzzz = 2") == "line 2: unknown key 'zzz' (known keys: a, b, list, name-with-dash)");
  CHECK(ParseError("a = 1\na = 2") == "line 2: key 'a' is already set on line 1");
  CHECK(ParseError("[t]\na = 1") == "line 1: tables ([section]) are not supported; write every key at the top level");
  CHECK(ParseError("a.b = 1") == "line 1: dotted keys such as 'a.x' are not supported");
  CHECK(ParseError("= 1") == "line 1: expected a key (a kvpeerd flag name without the leading dashes)");
  CHECK(ParseError("a 1") == "line 1: expected '=' after 'a'");
  CHECK(ParseError("a = {x = 1}") == "line 1: inline tables are not supported (value of 'a')");
  CHECK(ParseError("list = [[1]]") == "line 1: nested arrays are not supported (value of 'list')");
  CHECK(ParseError("list = [1 2]") == "line 1: expected ',' or ']' in the array of 'list'");
  CHECK(ParseError("a = \"\"\"x\"\"\"") == "line 1: multi-line strings are not supported (value of 'a')");
  CHECK(ParseError("a = \"x") == "line 1: the string value of 'a' has no closing quote");
  CHECK(ParseError("a = 'x\n'") == "line 1: the string value of 'a' has no closing quote");
  CHECK(ParseError("a = \"x\\") == "line 1: the string value of 'a' has no closing quote");
  CHECK(ParseError("a = \"\\q\"") == "line 1: invalid escape '\\q' in the value of 'a'");
  CHECK(ParseError("a = \"\\ud800\"") == "line 1: invalid unicode escape in the value of 'a'");
  CHECK(ParseError("a = \"\\u12\"") == "line 1: invalid unicode escape in the value of 'a'");
  CHECK(ParseError("a = hello") ==
        "line 1: the value of 'a' must be a quoted string (\"...\"), a number, true/false or an array");
  CHECK(ParseError("a = 1 2") == "line 1: unexpected text after the value of 'a'");
  CHECK(ParseError("a =") ==
        "line 1: the value of 'a' must be a quoted string (\"...\"), a number, true/false or an array");
  CHECK(ParseError("\n\nlist = [\n1,") == "line 3: the array of 'list' has no closing ']'");
  CHECK(ParseError("list = [1\n") == "line 1: the array of 'list' has no closing ']'");
}

}  // namespace
}  // namespace kvpeer::config
