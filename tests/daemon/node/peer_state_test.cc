// The one table of peer-state names that `status` and the kvpeer_peers
// metric show (docs/control-api.md, "Operator operations").
#include "daemon/node/peer_state.h"

#include <catch2/catch.hpp>

namespace kvpeer::daemon {
namespace {

TEST_CASE("each peer state has its documented name", "[peer_state]") {
  CHECK(PeerStateName(PeerState::kConnecting) == "connecting");
  CHECK(PeerStateName(PeerState::kHandshaking) == "handshaking");
  CHECK(PeerStateName(PeerState::kReady) == "ready");
  CHECK(PeerStateName(PeerState::kBackoff) == "backoff");
  CHECK(PeerStateName(PeerState::kClosed) == "closed");
  CHECK(kPeerStateNames.size() == static_cast<size_t>(PeerState::kClosed) + 1);
}

}  // namespace
}  // namespace kvpeer::daemon
