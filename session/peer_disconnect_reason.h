// PeerDisconnectReason: what a peer's disconnect{reason} says, mapped once,
// by exact match against the reasons the wire spec fixes and those this
// daemon sends word for word. The reason is peer input: any other text,
// including one that quotes or embeds a fixed reason, is kUnspecified, so a
// peer can never choose how this node counts its close.
//
// Thread-safety: pure functions over a constant table.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvpeer::session {

enum class PeerDisconnectReason {
  kUnspecified,             // no reason, or one that is not below
  kAuthenticationFailed,    // "authentication failed" (wire spec "Authentication and authorisation")
  kDuplicate,               // "duplicate" (wire spec "Transport and roles")
  kNodeNotConfigured,       // "node not configured" (wire spec "Transport and roles")
  kShuttingDown,            // "shutting down" or "kvpeerd is shutting down" (sent by kvpeerd)
  kTooManyPeers,            // "too many peers" (sent by kvpeerd, max-peers)
  kPeerRestarted,           // "peer restarted" (sent by kvpeerd)
  kDisconnectedByOperator,  // "disconnected by operator" (sent by kvpeerd)
  kHandshakeTimedOut,       // "handshake timed out" (sent by kvpeerd)
  kIdle,                    // "idle" (sent by kvpeerd, idle-peer-timeout-s: it held no work of this connection)
};

// What kvpeerd's sessions close with when it drains (docs/control-api.md,
// "Shutdown"): the reason every in-flight load reports and the disconnect
// its peers receive, one of the two texts of kShuttingDown.
inline constexpr std::string_view kDaemonShutdownReason = "kvpeerd is shutting down";

PeerDisconnectReason ParseDisconnectReason(const std::optional<std::string>& reason);

// The wire text this daemon sends for a fixed reason (for kShuttingDown the
// short one a refused connection gets; a drain sends kDaemonShutdownReason);
// empty for kUnspecified.
std::string DisconnectReasonText(PeerDisconnectReason reason);

}  // namespace kvpeer::session
