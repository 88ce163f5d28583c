// PeerState: where a peer entry of the PeerManager stands, and the one
// table of its names, as `status` (docs/control-api.md, "Operator
// operations") and the kvpeer_peers metric show them.
//
// Thread-safety: constants only.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace kvpeer::daemon {

enum class PeerState { kConnecting, kHandshaking, kReady, kBackoff, kClosed };

// Indexed by PeerState, in its order.
inline constexpr std::array<std::string_view, 5> kPeerStateNames = {"connecting", "handshaking", "ready", "backoff",
                                                                    "closed"};

constexpr std::string_view PeerStateName(PeerState state) { return kPeerStateNames[static_cast<size_t>(state)]; }

}  // namespace kvpeer::daemon
