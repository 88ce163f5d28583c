// HOST:PORT addresses: --listen, --node-id, --metrics-listen, peer names in
// the control API, and the endpoints shown in logs and status.
//
// HOST is a hostname (letters, digits, '.', '-', '_'), an IPv4 address, or
// an IPv6 address in brackets ("[::1]:5710"); PORT is decimal 0..65535.
// Brackets are required for IPv6 so that the last ':' always separates the
// port, which keeps the syntax unambiguous for operators and for peers.
//
// One split serves three strictnesses: ParseHostPort checks the host (what
// an operator types into a flag is checked before anything binds or dials),
// SplitHostPort checks only the shape (a peer name from the control API is
// looked up as given; the resolver reports a bad host), and the wire's
// peer_id rule (protocol/peer_id.h) builds its own messages from the parts.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvpeer {

// The longest host name DNS can carry, in its dotted text form.
inline constexpr size_t kMaxHostnameChars = 253;

struct HostPort {
  std::string host;  // without brackets: "::1", "10.0.0.1", "node-a"
  uint16_t port = 0;
};

// The text either side of the last ':', as written (brackets included).
struct HostPortText {
  std::string_view host;
  std::string_view port;
};
// nullopt if `text` has no ':'.
std::optional<HostPortText> SplitAtLastColon(std::string_view text);

// Decimal digits only (no sign, no spaces), leading zeros allowed, value
// ..= 65535; nullopt otherwise.
std::optional<uint16_t> ParsePort(std::string_view text);

// Whether `text` is an IPv6 address (no brackets).
bool IsIpv6Address(std::string_view text);

// Parses "HOST:PORT" with HOST as above and PORT at most five digits;
// nullopt if the text does not have that shape.
std::optional<HostPort> ParseHostPort(std::string_view text);

// Splits at the last ':' into a non-empty host (brackets removed) and a
// port of decimal digits (leading zeros allowed) up to 65535; the host's
// characters are not checked. nullopt if the text does not have that shape.
std::optional<HostPort> SplitHostPort(std::string_view text);

// "host:port", with brackets around an IPv6 host.
std::string FormatHostPort(const HostPort& address);

// `host`, in brackets if it is an IPv6 address (has a ':'), ready to be
// followed by ":port".
std::string BracketedHost(std::string_view host);

// True for the "any address" hosts 0.0.0.0 and :: (in any IPv6 spelling).
bool IsWildcardHost(std::string_view host);

}  // namespace kvpeer
