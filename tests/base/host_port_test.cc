#include "base/host_port.h"

#include <catch2/catch.hpp>
#include <string>

namespace kvpeer {
namespace {

TEST_CASE("HOST:PORT forms that parse") {
  struct Case {
    std::string text, host;
    uint16_t port;
  };
  for (const Case& c :
       {Case{"127.0.0.1:5710", "127.0.0.1", 5710}, Case{"node-a.example:1", "node-a.example", 1},
        Case{"[::1]:0", "::1", 0}, Case{"[fd00::7]:65535", "fd00::7", 65535}, Case{"host_1:080", "host_1", 80}}) {
    std::optional<HostPort> parsed = ParseHostPort(c.text);
    INFO(c.text);
    REQUIRE(parsed.has_value());
    CHECK(parsed->host == c.host);
    CHECK(parsed->port == c.port);
  }
}

TEST_CASE("HOST:PORT forms that do not") {
  for (std::string text : {"", "host", ":5710", "host:", "host:65536", "host:-1", "host:+1", "host:5710 ", " host:5710",
                           "::1:5710", "[::1]", "[nonsense]:1", "[::1:5710", "a b:1", "host:000001"}) {
    INFO(text);
    CHECK_FALSE(ParseHostPort(text).has_value());
  }
}

TEST_CASE("SplitHostPort checks the shape only") {
  struct Case {
    std::string text, host;
    uint16_t port;
  };
  for (const Case& c : {Case{"node-a:5710", "node-a", 5710}, Case{"[::1]:0", "::1", 0}, Case{"::1:5710", "::1", 5710},
                        Case{"a b:1", "a b", 1}, Case{"host:000001", "host", 1}, Case{"[]:7", "[]", 7},
                        Case{"[nonsense]:65535", "nonsense", 65535}}) {
    std::optional<HostPort> split = SplitHostPort(c.text);
    INFO(c.text);
    REQUIRE(split.has_value());
    CHECK(split->host == c.host);
    CHECK(split->port == c.port);
  }
  for (std::string text : {"", "host", ":5710", "host:", "host:65536", "host:-1", "host:+1", "host:5710 ", "host:http",
                           "host:99999999999999999999"}) {
    INFO(text);
    CHECK_FALSE(SplitHostPort(text).has_value());
  }
}

TEST_CASE("SplitAtLastColon keeps both parts as written") {
  const std::optional<HostPortText> parts = SplitAtLastColon("[::1]:0057");
  REQUIRE(parts.has_value());
  CHECK(parts->host == "[::1]");
  CHECK(parts->port == "0057");
  CHECK(SplitAtLastColon(":")->host.empty());
  CHECK_FALSE(SplitAtLastColon("no-colon").has_value());
}

TEST_CASE("ParsePort reads decimal digits up to 65535") {
  CHECK(ParsePort("0") == 0);
  CHECK(ParsePort("00080") == 80);
  CHECK(ParsePort("65535") == 65535);
  for (std::string text : {"", "65536", "-1", "+1", " 1", "1 ", "0x10", "99999999999999999999"}) {
    INFO(text);
    CHECK_FALSE(ParsePort(text).has_value());
  }
}

TEST_CASE("IsIpv6Address takes unbracketed IPv6 only") {
  CHECK(IsIpv6Address("::1"));
  CHECK(IsIpv6Address("fd00::7"));
  CHECK_FALSE(IsIpv6Address("[::1]"));
  CHECK_FALSE(IsIpv6Address("10.0.0.1"));
  CHECK_FALSE(IsIpv6Address(""));
}

TEST_CASE("BracketedHost brackets IPv6 hosts only") {
  CHECK(BracketedHost("::1") == "[::1]");
  CHECK(BracketedHost("10.0.0.1") == "10.0.0.1");
  CHECK(BracketedHost("node-a") == "node-a");
}

TEST_CASE("formatting brackets IPv6 hosts") {
  CHECK(FormatHostPort({"::1", 5710}) == "[::1]:5710");
  CHECK(FormatHostPort({"node", 1}) == "node:1");
}

TEST_CASE("wildcard hosts") {
  CHECK(IsWildcardHost("0.0.0.0"));
  CHECK(IsWildcardHost("::"));
  CHECK(IsWildcardHost("0::0"));
  CHECK_FALSE(IsWildcardHost("127.0.0.1"));
  CHECK_FALSE(IsWildcardHost("::1"));
  CHECK_FALSE(IsWildcardHost("localhost"));
}

}  // namespace
}  // namespace kvpeer
