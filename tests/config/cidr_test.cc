#include "config/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <string>

namespace kvpeer::config {
namespace {

Cidr MustParse(const std::string& text) {
  StatusOr<Cidr> block = Cidr::Parse(text);
  INFO(text << ": " << block.status().message());
  REQUIRE(block.ok());
  return *block;
}

std::string ParseError(const std::string& text) {
  StatusOr<Cidr> block = Cidr::Parse(text);
  CHECK_FALSE(block.ok());
  return block.status().message();
}

IpAddress Ip(const std::string& text) {
  std::optional<IpAddress> address = IpAddress::Parse(text);
  REQUIRE(address.has_value());
  return *address;
}

TEST_CASE("IPv4 and IPv6 CIDRs parse into canonical form") {
  CHECK(MustParse("10.0.0.0/8").ToString() == "10.0.0.0/8");
  CHECK(MustParse("0.0.0.0/0").prefix_len() == 0);
  CHECK(MustParse("192.168.1.7/32").ToString() == "192.168.1.7/32");
  CHECK(MustParse("FD00:0::/8").ToString() == "fd00::/8");
  CHECK(MustParse("::/0").ToString() == "::/0");
  CHECK(MustParse("2001:db8::1/128").ToString() == "2001:db8::1/128");
  SECTION("a bare address is a single host") {
    CHECK(MustParse("10.1.2.3").ToString() == "10.1.2.3/32");
    CHECK(MustParse("fd00::1").ToString() == "fd00::1/128");
  }
}

TEST_CASE("malformed CIDRs are rejected with the reason") {
  CHECK(ParseError("10.0.0.0/33") == "prefix length must be 0..32 for IPv4");
  CHECK(ParseError("fd00::/129") == "prefix length must be 0..128 for IPv6");
  CHECK(ParseError("10.0.0.0/") == "prefix length must be 0..32 for IPv4");
  CHECK(ParseError("10.0.0.0/-1") == "prefix length must be 0..32 for IPv4");
  CHECK(ParseError("10.0.0.0/+8") == "prefix length must be 0..32 for IPv4");
  CHECK(ParseError("10.0.0.0/8 ") == "prefix length must be 0..32 for IPv4");
  CHECK(ParseError("10.0.0/8") == "not an IPv4 or IPv6 address before the '/'");
  CHECK(ParseError("[fd00::]/8") == "not an IPv4 or IPv6 address before the '/'");
  CHECK(ParseError("fe80::1%eth0/64") == "not an IPv4 or IPv6 address before the '/'");
  CHECK(ParseError("") == "not an IPv4 or IPv6 address before the '/'");
  CHECK(ParseError("10.0.0.1/8") == "host bits are set; did you mean 10.0.0.0/8?");
  CHECK(ParseError("fd00::1/64") == "host bits are set; did you mean fd00::/64?");
  CHECK_FALSE(Cidr::Parse("10.0.0.0/33").ok());
}

TEST_CASE("IPv4 matching") {
  Cidr block = MustParse("10.20.0.0/14");
  CHECK(block.Contains(Ip("10.20.0.0")));
  CHECK(block.Contains(Ip("10.23.255.255")));
  CHECK_FALSE(block.Contains(Ip("10.24.0.0")));
  CHECK_FALSE(block.Contains(Ip("10.19.255.255")));
  CHECK(MustParse("0.0.0.0/0").Contains(Ip("203.0.113.9")));
  CHECK(MustParse("203.0.113.9").Contains(Ip("203.0.113.9")));
  CHECK_FALSE(MustParse("203.0.113.9").Contains(Ip("203.0.113.8")));
  CHECK_FALSE(block.Contains(Ip("fd00::1")));
}

TEST_CASE("IPv6 matching") {
  Cidr block = MustParse("2001:db8:abcc::/47");
  CHECK(block.Contains(Ip("2001:db8:abcc::1")));
  CHECK(block.Contains(Ip("2001:db8:abcd:ffff::1")));
  CHECK_FALSE(block.Contains(Ip("2001:db8:abcb::1")));
  CHECK_FALSE(block.Contains(Ip("2001:db8:abce::1")));
  CHECK(MustParse("::/0").Contains(Ip("fd00::1")));
  CHECK_FALSE(MustParse("fd00::/8").Contains(Ip("10.0.0.1")));
}

TEST_CASE("IPv4-mapped IPv6 peers match IPv4 blocks (dual-stack listener)") {
  CHECK(MustParse("10.0.0.0/8").Contains(Ip("::ffff:10.1.2.3")));
  CHECK_FALSE(MustParse("10.0.0.0/8").Contains(Ip("::ffff:11.1.2.3")));
  CHECK(MustParse("::ffff:0:0/96").Contains(Ip("10.1.2.3")));
  CHECK(Ip("::ffff:10.1.2.3").Unmapped() == Ip("10.1.2.3"));
  CHECK(Ip("fd00::1").Unmapped() == Ip("fd00::1"));
}

TEST_CASE("addresses from accepted sockets") {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  inet_pton(AF_INET, "192.0.2.7", &v4.sin_addr);
  std::optional<IpAddress> a = IpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&v4));
  REQUIRE(a.has_value());
  CHECK(a->ToString() == "192.0.2.7");

  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "::ffff:192.0.2.7", &v6.sin6_addr);
  std::optional<IpAddress> b = IpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&v6));
  REQUIRE(b.has_value());
  CHECK(b->family == IpAddress::Family::kV6);
  CHECK(MustParse("192.0.2.0/24").Contains(*b));

  sockaddr unix_address{};
  unix_address.sa_family = AF_UNIX;
  CHECK_FALSE(IpAddress::FromSockaddr(&unix_address).has_value());
}

TEST_CASE("an empty allowlist permits everyone; otherwise any block may match") {
  CHECK(AllowlistPermits({}, Ip("203.0.113.1")));
  std::vector<Cidr> allowlist = {MustParse("10.0.0.0/8"), MustParse("fd00::/8")};
  CHECK(AllowlistPermits(allowlist, Ip("10.9.9.9")));
  CHECK(AllowlistPermits(allowlist, Ip("fd12::1")));
  CHECK(AllowlistPermits(allowlist, Ip("::ffff:10.9.9.9")));
  CHECK_FALSE(AllowlistPermits(allowlist, Ip("192.168.0.1")));
  CHECK_FALSE(AllowlistPermits(allowlist, Ip("fe80::1")));
}

}  // namespace
}  // namespace kvpeer::config
