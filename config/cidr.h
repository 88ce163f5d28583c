// IP addresses and CIDR blocks for the peer allowlist (--allow-cidr).
//
// The daemon checks a peer's address against the allowlist on accept,
// before reading a byte (wire-protocol.md section 5). A daemon listening on
// "[::]" sees IPv4 peers as IPv4-mapped IPv6 addresses (::ffff:a.b.c.d);
// Contains treats those as the IPv4 address they carry, so "10.0.0.0/8"
// means the same thing whichever way the daemon listens.
//
// Thread-safety: plain values; const methods may be called concurrently.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status_or.h"

namespace kvpeer::config {

struct IpAddress {
  enum class Family { kV4, kV6 };

  Family family = Family::kV4;
  std::array<uint8_t, 16> bytes{};  // network order; IPv4 uses the first 4

  // "10.1.2.3" or "fd00::1" (no brackets, no zone); nullopt otherwise.
  static std::optional<IpAddress> Parse(std::string_view text);
  // From an accepted socket's peer address (AF_INET or AF_INET6).
  static std::optional<IpAddress> FromSockaddr(const sockaddr* address);

  // The IPv4 address inside an IPv4-mapped IPv6 address; *this otherwise.
  IpAddress Unmapped() const;
  std::string ToString() const;
  int BitLength() const { return family == Family::kV4 ? 32 : 128; }

  bool operator==(const IpAddress&) const = default;
};

class Cidr {
 public:
  // Parses "ADDRESS/PREFIX" ("10.0.0.0/8", "fd00::/8") or a bare address
  // (one host). Host bits below the prefix must be zero: "10.0.0.1/8" is
  // rejected rather than silently widened. Fails (kInvalid) saying why
  // ("prefix length must be 0..32 for IPv4").
  static StatusOr<Cidr> Parse(std::string_view text);

  // True if `address` lies in this block. IPv4-mapped addresses count as
  // IPv4 (see the file comment), and an IPv6 block also matches the mapped
  // form of an IPv4 address ("::ffff:0:0/96" covers all of IPv4).
  bool Contains(const IpAddress& address) const;

  // Canonical text: "10.0.0.0/8", "fd00::/8".
  std::string ToString() const;

  const IpAddress& network() const { return network_; }
  int prefix_len() const { return prefix_len_; }

 private:
  Cidr(IpAddress network, int prefix_len) : network_(network), prefix_len_(prefix_len) {}

  IpAddress network_;
  int prefix_len_;
};

// True if `allowlist` is empty (no restriction configured) or one of its
// blocks contains `address`.
bool AllowlistPermits(const std::vector<Cidr>& allowlist, const IpAddress& address);

}  // namespace kvpeer::config
