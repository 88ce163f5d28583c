// HOST:PORT addresses, as used by --listen, --node-id and peer names.
//
// HOST is a hostname (letters, digits, '.', '-', '_'), an IPv4 address, or
// an IPv6 address in brackets ("[::1]:5710"); PORT is decimal 0..65535.
// Brackets are required for IPv6 so that the last ':' always separates the
// port, which keeps the syntax unambiguous for operators and for peers.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvpeer::config {

struct HostPort {
  std::string host;  // without brackets: "::1", "10.0.0.1", "node-a"
  uint16_t port = 0;
};

// Parses "HOST:PORT"; nullopt if the text does not have that shape.
std::optional<HostPort> ParseHostPort(std::string_view text);

// "host:port", with brackets around an IPv6 host.
std::string FormatHostPort(const HostPort& address);

// True for the "any address" hosts 0.0.0.0 and :: (in any IPv6 spelling).
bool IsWildcardHost(std::string_view host);

}  // namespace kvpeer::config
