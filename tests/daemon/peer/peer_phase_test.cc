// PeerPhase: the lifecycle table of a peer connection (daemon/peer/peer_phase.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "daemon/peer/peer_phase.h"

namespace kvpeer::daemon {
namespace {

using enum PeerPhase;

constexpr PeerPhase kAllPhases[] = {kIdle, kResolving, kConnecting, kTlsHandshake, kRunning, kLingering, kClosed};

// Walks `path` from kIdle; every step must be taken.
void Walk(std::initializer_list<PeerPhase> path) {
  PeerPhaseTracker tracker;
  for (PeerPhase next : path) {
    INFO(PhaseName(tracker.now()) << " -> " << PhaseName(next));
    REQUIRE(tracker.Enter(next));
    REQUIRE(tracker.now() == next);
  }
}

TEST_CASE("peer phase: every way a connection really goes is allowed", "[peer_phase]") {
  Walk({kRunning, kLingering, kClosed});                              // accepted TCP, graceful close
  Walk({kTlsHandshake, kRunning, kClosed});                           // accepted TLS, socket lost
  Walk({kResolving, kConnecting, kRunning, kLingering, kClosed});     // dialled TCP
  Walk({kResolving, kConnecting, kTlsHandshake, kRunning, kClosed});  // dialled TLS
  Walk({kResolving, kClosed});                                        // lookup failed
  Walk({kResolving, kConnecting, kClosed});                           // connect failed
  Walk({kResolving, kConnecting, kTlsHandshake, kClosed});            // TLS handshake failed
  Walk({kTlsHandshake, kClosed});                                     // accepted, handshake failed
  Walk({kClosed});                                                    // closed before it started
}

TEST_CASE("peer phase: the table is exactly the documented one", "[peer_phase]") {
  const std::vector<std::pair<PeerPhase, PeerPhase>> allowed = {
      {kIdle, kResolving},
      {kIdle, kTlsHandshake},
      {kIdle, kRunning},
      {kIdle, kClosed},
      {kResolving, kConnecting},
      {kResolving, kClosed},
      {kConnecting, kTlsHandshake},
      {kConnecting, kRunning},
      {kConnecting, kClosed},
      {kTlsHandshake, kRunning},
      {kTlsHandshake, kClosed},
      {kRunning, kLingering},
      {kRunning, kClosed},
      {kLingering, kClosed},
  };
  for (PeerPhase from : kAllPhases) {
    for (PeerPhase to : kAllPhases) {
      const bool listed = std::find(allowed.begin(), allowed.end(), std::pair{from, to}) != allowed.end();
      INFO(PhaseName(from) << " -> " << PhaseName(to));
      CHECK(PhaseMayFollow(from, to) == listed);
    }
  }
}

TEST_CASE("peer phase: an illegal step is refused and the phase stays", "[peer_phase]") {
  PeerPhaseTracker tracker;
  REQUIRE(tracker.Enter(kRunning));
  CHECK_FALSE(tracker.Enter(kConnecting));  // no way back
  CHECK(tracker.now() == kRunning);
  REQUIRE(tracker.Enter(kClosed));
  for (PeerPhase next : kAllPhases) CHECK_FALSE(tracker.Enter(next));  // closed is final
  CHECK(tracker.socket_closed());
}

TEST_CASE("peer phase: the questions the connection asks", "[peer_phase]") {
  PeerPhaseTracker tracker;
  CHECK_FALSE(tracker.session_over());
  CHECK_FALSE(tracker.loops_started());
  REQUIRE(tracker.Enter(kTlsHandshake));
  CHECK_FALSE(tracker.loops_started());
  REQUIRE(tracker.Enter(kRunning));
  CHECK(tracker.loops_started());
  CHECK_FALSE(tracker.session_over());
  REQUIRE(tracker.Enter(kLingering));
  CHECK(tracker.loops_started());
  CHECK(tracker.session_over());
  CHECK(tracker.lingering());
  CHECK_FALSE(tracker.socket_closed());
  REQUIRE(tracker.Enter(kClosed));
  CHECK(tracker.session_over());
  CHECK_FALSE(tracker.loops_started());
  CHECK(tracker.socket_closed());
}

}  // namespace
}  // namespace kvpeer::daemon
