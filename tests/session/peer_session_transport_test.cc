// PeerSession::StartAwaitingTransport / TransportUp: a dialled session
// whose socket is not up yet (its peer's name is being resolved) keeps its
// handshake deadline, liveness and pings for the TCP connect, while the work
// queued on it still ends at its own timeout (docs/security.md, "Name
// resolution").
#include <catch2/catch.hpp>

#include "session/peer_session.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using State = PeerSession::State;

// A dials B, but A's socket is "resolving": nothing is delivered yet.
struct ResolvingPair : SessionPair {
  ResolvingPair() {
    a.config.client.load_timeout = 3s;
    MakeSessions();
    a.session->StartAwaitingTransport();
  }
  void AdvanceA(std::chrono::milliseconds step, int times) {
    for (int i = 0; i < times; ++i) {
      clock.Advance(step);
      a.session->OnTick();
    }
  }
};

TEST_CASE("a session awaiting its transport: no handshake deadline, no liveness, no ping", "[session][transport]") {
  ResolvingPair p;
  PeerSession& a = *p.a.session;
  REQUIRE(a.NextDeadline() == std::nullopt);
  p.AdvanceA(1s, 30);  // longer than the handshake (10 s) and liveness (10 s) timeouts
  CHECK(a.state() == State::kHandshaking);
  CHECK(p.pipe.Queued(SessionPipe::kA) == 1);  // only the connect, waiting for the socket
}

TEST_CASE("work queued while awaiting the transport still ends at its own timeout", "[session][transport]") {
  ResolvingPair p;
  PeerSession& a = *p.a.session;
  REQUIRE(a.RequestBlocks(1, "pd", {"k1"}, {0}, p.a.region->Sink()).ok());
  REQUIRE(a.NextDeadline().has_value());
  p.AdvanceA(100ms, 29);
  CHECK(a.TakeResults().loads.empty());
  p.AdvanceA(100ms, 2);
  const SessionResults r = a.TakeResults();
  REQUIRE(r.loads.size() == 1);
  CHECK_FALSE(r.loads[0].success);
  CHECK(a.state() == State::kHandshaking);
}

TEST_CASE("the handshake deadline runs from TransportUp", "[session][transport]") {
  ResolvingPair p;
  PeerSession& a = *p.a.session;
  p.AdvanceA(1s, 8);  // the lookup took 8 s
  a.TransportUp();
  p.AdvanceA(1s, 9);
  CHECK(a.state() == State::kHandshaking);
  p.AdvanceA(1s, 1);
  CHECK(a.state() == State::kClosed);
  CHECK(a.close_reason() == "handshake timed out");
}

TEST_CASE("after TransportUp the handshake completes and queued work flows", "[session][transport]") {
  ResolvingPair p;
  p.AdvanceA(1s, 4);
  p.a.session->TransportUp();
  p.b.session->Start();
  p.pipe.Pump();
  CHECK(p.a.session->ready());
  CHECK(p.b.session->ready());
}

}  // namespace
}  // namespace kvpeer::session::testing
