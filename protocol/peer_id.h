// The syntax of a `peer_id` (wire-protocol.md section 2, common field rules):
// HOST:PORT, HOST a DNS name (letters, digits, '-', '.'), an IPv4 literal or
// a bracketed IPv6 literal, PORT decimal 1 ..= 65535 without leading zeros,
// at most 261 characters in all.
//
// Checked wherever a peer_id is decoded (connect, connect_ack), so a peer id
// that reaches a log line, a map key or a status field is always printable
// and short.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvpeer::protocol {

// nullopt when `text` is a well-formed peer_id; otherwise the rule it broke,
// phrased to follow the field name ("must be HOST:PORT; ...").
std::optional<std::string> PeerIdSyntaxError(std::string_view text);

}  // namespace kvpeer::protocol
