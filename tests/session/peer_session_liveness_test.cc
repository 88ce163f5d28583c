// PeerSession: liveness, the ping after the idle interval, the pong's round
// trip, a silent peer's timeout, and the timers NextDeadline reports.
#include <catch2/catch.hpp>
#include <optional>

#include "session/peer_session.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using protocol::Message;
using State = PeerSession::State;

TEST_CASE("ping after the idle interval, pong measures the round trip", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  p.clock.Advance(1900ms);
  p.Tick();
  CHECK(p.pipe.Queued(SessionPipe::kA) == 0);  // not idle long enough
  p.clock.Advance(100ms);
  p.a.session->OnTick();
  REQUIRE(p.pipe.Queued(SessionPipe::kA) == 1);
  const auto ping = std::get<protocol::Ping>(p.pipe.Outbox(SessionPipe::kA).front().message);
  CHECK(ping.nonce.size() == 32);
  REQUIRE(p.pipe.Step(SessionPipe::kA));  // B answers at once
  REQUIRE(p.pipe.Queued(SessionPipe::kB) == 1);
  CHECK(std::get<protocol::Pong>(p.pipe.Outbox(SessionPipe::kB).front().message).nonce == ping.nonce);
  p.clock.Advance(35ms);
  CHECK_FALSE(p.a.session->rtt().has_value());
  p.pipe.Pump();
  REQUIRE(p.a.session->rtt().has_value());
  CHECK(*p.a.session->rtt() == 35ms);
}

TEST_CASE("a pong with another nonce measures nothing", "[session]") {
  LoneSession t;
  t.MakeReady();
  CHECK(t.session->OnMessage(protocol::Pong{Token(12345)}).ok());
  CHECK_FALSE(t.session->rtt().has_value());
  t.clock.Advance(2s);
  t.session->OnTick();
  REQUIRE(std::holds_alternative<protocol::Ping>(t.Last()));
  CHECK(t.session->OnMessage(protocol::Pong{Token(12345)}).ok());
  CHECK_FALSE(t.session->rtt().has_value());
}

TEST_CASE("sending anything postpones the ping", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  p.clock.Advance(1500ms);
  CHECK(p.a.session->RegisterLookup("r", "k") == ProbeAnswer::kRetry);
  p.a.session->FlushPendingLookups();
  p.clock.Advance(1500ms);
  p.a.session->OnTick();
  CHECK(p.pipe.Queued(SessionPipe::kA) == 1);  // the lookup, no ping
  REQUIRE(p.a.session->NextDeadline().has_value());
  CHECK(*p.a.session->NextDeadline() == p.clock.now() + 500ms);
}

TEST_CASE("a silent peer is dead after the liveness timeout and every load fails", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  auto& a = *p.a.session;
  REQUIRE(a.RequestBlocks(1, "pd-1", {"k1"}, {0}, p.a.region->Sink()).ok());
  REQUIRE(a.RequestBlocks(2, "pd-2", {"k2", "k3"}, {1, 2}, p.a.region->Sink()).ok());
  p.pipe.Pump();                                                // B now holds the demand but never answers again
  CHECK(a.RegisterLookup("sym", "k4") == ProbeAnswer::kRetry);  // stays unresolved
  a.FlushPendingLookups();
  for (int i = 0; i < 9; ++i) {
    p.clock.Advance(1s);
    a.OnTick();
    CHECK(a.state() == State::kReady);
  }
  CHECK(p.pipe.Queued(SessionPipe::kA) >= 1);  // pings went out
  p.clock.Advance(1s);
  a.OnTick();
  CHECK(a.state() == State::kClosed);
  CHECK(a.close_reason() == "peer silent for 10 s");
  CHECK(std::holds_alternative<protocol::Disconnect>(p.pipe.Outbox(SessionPipe::kA).back().message));
  SessionResults r = a.TakeResults();
  REQUIRE(r.loads.size() == 2);
  for (const auto& l : r.loads) {
    CHECK_FALSE(l.success);
    CHECK(l.reason == "peer silent for 10 s");
  }
  std::sort(r.failed_request_ids.begin(), r.failed_request_ids.end());
  CHECK(r.failed_request_ids == std::vector<std::string>{"pd-1", "pd-2", "sym"});
  CHECK(a.TakeResults().loads.empty());
  CHECK(a.LoadsInFlight() == 0);
}

TEST_CASE("liveness counts every received frame", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  for (int i = 0; i < 30; ++i) {  // pings both ways keep it alive
    p.clock.Advance(1s);
    p.Tick();
    p.pipe.Pump();
  }
  CHECK(p.a.session->ready());
  CHECK(p.b.session->ready());
  CHECK(p.a.session->rtt().has_value());
}

TEST_CASE("liveness timeout with other durations is reported in those units", "[session]") {
  SessionPair p;
  p.a.config.liveness_timeout = 1500ms;
  p.a.config.ping_interval = 10s;
  p.ConnectAndPump();
  p.clock.Advance(1500ms);
  p.a.session->OnTick();
  CHECK(p.a.session->close_reason() == "peer silent for 1500 ms");
}

TEST_CASE("NextDeadline is the earliest timer", "[session]") {
  SessionPair p;
  p.a.config.ping_interval = 20s;
  p.a.config.handshake_timeout = 5s;
  p.Connect();
  const TimePoint start = p.clock.now();
  REQUIRE(p.a.session->NextDeadline().has_value());
  CHECK(*p.a.session->NextDeadline() == start + 5s);  // handshake
  p.pipe.Pump();
  CHECK(*p.a.session->NextDeadline() == start + 10s);  // liveness, now that the handshake is done
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k"}, {0}, p.a.region->Sink()).ok());
  p.pipe.Pump();
  CHECK(*p.a.session->NextDeadline() <= start + 10s);
  p.a.session->Close(CloseCause::kOperator, "bye");
  CHECK_FALSE(p.a.session->NextDeadline().has_value());
}

}  // namespace
}  // namespace kvpeer::session::testing
