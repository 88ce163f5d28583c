// Reason labels: why sessions closed and jobs failed, mapped to a small
// fixed set of metric label values, so that a label can never take
// unboundedly many values whatever a peer sends. Every label comes from a
// cause value, never from reason text: session closes and handshake
// failures from session::CloseCause (and, for a peer's disconnect, from
// session::PeerDisconnectReason, its exact wire reason), failed loads and
// stores from session::JobFailure. The switches list every cause, so a new
// cause is a compile error, not a silent catch-all.
//
// Each function returns an index into its label array; the last label of
// each array is the catch-all.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "session/close_cause.h"
#include "session/peer_disconnect_reason.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

// A session that ended before its handshake completed (and was not closed
// by this node on purpose).
inline constexpr std::array<std::string_view, 15> kHandshakeFailureLabels = {"authentication",
                                                                             "config_fingerprint",
                                                                             "hash_seed",
                                                                             "block_len",
                                                                             "wire_version",
                                                                             "peer_id",
                                                                             "self_connection",
                                                                             "tls",
                                                                             "timeout",
                                                                             "connect_failed",
                                                                             "peer_not_configured",
                                                                             "peer_shutting_down",
                                                                             "connection_lost",
                                                                             "protocol_violation",
                                                                             "other"};
// A peer's disconnect counts by its exact reason (`peer_reason`): a fixed
// reason the peer refused us with keeps its label ("authentication failed"
// is authentication); any other text, including a settings mismatch the
// peer words in its reason, is "other" on this end (the end that found the
// mismatch counts it under its field).
size_t HandshakeFailureLabel(session::CloseCause cause, session::PeerDisconnectReason peer_reason);
// The handshake failures where one side refused the other's settings or
// identity (authentication .. self_connection). A node without a PSK of its
// own may be ready already when its peer refuses it: such a close still
// counts as a failed handshake.
bool IsHandshakeRefusal(size_t handshake_failure);

// A session that was ready and has ended.
inline constexpr std::array<std::string_view, 10> kSessionCloseLabels = {"peer_disconnected",
                                                                         "connection_lost",
                                                                         "peer_silent",
                                                                         "protocol_violation",
                                                                         "operator",
                                                                         "shutdown",
                                                                         "duplicate",
                                                                         "peer_restarted",
                                                                         "idle",
                                                                         "other"};
size_t SessionCloseLabel(session::CloseCause cause);

// A failed load's label, from its cause (session::JobResult::failure),
// never from its reason text. A destination region that shrank is counted
// with the session closes, as it was before causes were values.
inline constexpr std::array<std::string_view, 7> kLoadFailureLabels = {
    "timeout", "request_finished", "peer_failed", "incomplete", "checksum", "shutdown", "session_closed"};
size_t LoadFailureLabel(session::JobFailure cause);

// A failed store job's label, from its cause (session::JobResult::failure).
inline constexpr std::array<std::string_view, 6> kStoreFailureLabels = {"timeout",  "unfetched",      "aborted",
                                                                        "shutdown", "session_closed", "other"};
size_t StoreFailureLabel(session::JobFailure cause);

}  // namespace kvpeer::daemon
