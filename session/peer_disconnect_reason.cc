#include "session/peer_disconnect_reason.h"

#include <array>
#include <utility>

namespace kvpeer::session {
namespace {

using Entry = std::pair<std::string_view, PeerDisconnectReason>;

constexpr std::array<Entry, 10> kFixedReasons = {{
    {"authentication failed", PeerDisconnectReason::kAuthenticationFailed},
    {"duplicate", PeerDisconnectReason::kDuplicate},
    {"node not configured", PeerDisconnectReason::kNodeNotConfigured},
    {"shutting down", PeerDisconnectReason::kShuttingDown},
    {kDaemonShutdownReason, PeerDisconnectReason::kShuttingDown},
    {"too many peers", PeerDisconnectReason::kTooManyPeers},
    {"peer restarted", PeerDisconnectReason::kPeerRestarted},
    {"disconnected by operator", PeerDisconnectReason::kDisconnectedByOperator},
    {"handshake timed out", PeerDisconnectReason::kHandshakeTimedOut},
    {"idle", PeerDisconnectReason::kIdle},
}};

}  // namespace

PeerDisconnectReason ParseDisconnectReason(const std::optional<std::string>& reason) {
  if (!reason) return PeerDisconnectReason::kUnspecified;
  for (const auto& [text, value] : kFixedReasons) {
    if (*reason == text) return value;
  }
  return PeerDisconnectReason::kUnspecified;
}

std::string DisconnectReasonText(PeerDisconnectReason reason) {
  for (const auto& [text, value] : kFixedReasons) {
    if (value == reason) return std::string(text);
  }
  return {};
}

}  // namespace kvpeer::session
