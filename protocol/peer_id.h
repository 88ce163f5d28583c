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

#include <string_view>

#include "base/status.h"

namespace kvpeer::protocol {

// Ok when `text` is a well-formed peer_id; otherwise kInvalid with the rule
// it broke, phrased to follow the field name ("must be HOST:PORT; ..."). The
// check does not know where the text came from; the wire reader reports it
// as a kViolation.
Status PeerIdSyntaxError(std::string_view text);

}  // namespace kvpeer::protocol
