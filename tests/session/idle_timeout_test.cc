// SessionConfig::idle_timeout: a ready session that holds no work and has
// carried nothing but ping and pong for the timeout closes itself with
// disconnect{reason:"idle"} (CloseCause::kIdle); work held by either role,
// or any other frame, keeps it open (docs/operations.md, "Idle peer
// connections").
#include <catch2/catch.hpp>

#include "session/close_cause.h"
#include "session/peer_disconnect_reason.h"
#include "session/peer_session.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using State = PeerSession::State;

// Time passes in one-second steps, both ends ticking and the pipe carrying
// what they send (their pings and pongs among it).
void RunFor(SessionPair& p, int seconds) {
  for (int i = 0; i < seconds; ++i) {
    p.clock.Advance(1s);
    p.Tick();
    p.pipe.Pump();
  }
}

// `node` publishes one filled block under `key`, for its peer to find.
void PublishOne(TestNode& node, const protocol::Key& key) {
  node.region->Fill(3, 33);
  node.index.Publish(key, 3);
}

// `session` probes `key` for `kv` and sends the lookup at once.
void ProbeNow(PeerSession& session, const std::string& kv, const protocol::Key& key) {
  CHECK(session.RegisterLookup(kv, key) == ProbeAnswer::kRetry);
  session.FlushPendingLookups();
}

bool IdleClosed(const PeerSession& s) { return s.state() == State::kClosed && s.close_cause() == CloseCause::kIdle; }

TEST_CASE("idle: a session without work closes after the timeout with disconnect idle", "[session][idle]") {
  SessionPair p;
  p.a.config.idle_timeout = 5s;
  p.ConnectAndPump();
  RunFor(p, 4);  // pings and pongs went both ways meanwhile
  CHECK(p.a.session->ready());
  CHECK(p.a.session->rtt().has_value());
  RunFor(p, 1);
  REQUIRE(IdleClosed(*p.a.session));
  CHECK(p.a.session->close_reason() == "closed after 5 s without work");
  const SessionResults r = p.a.session->TakeResults();
  CHECK(r.loads.empty());
  CHECK(r.failed_request_ids.empty());
  // The peer got the fixed reason and counts it as such.
  const auto& b_got = p.pipe.Delivered(SessionPipe::kB);
  REQUIRE(std::holds_alternative<protocol::Disconnect>(b_got.back()));
  CHECK(std::get<protocol::Disconnect>(b_got.back()).reason == std::optional<std::string>("idle"));
  CHECK(p.b.session->close_cause() == CloseCause::kPeerDisconnected);
  CHECK(p.b.session->peer_disconnect_reason() == PeerDisconnectReason::kIdle);
}

TEST_CASE("idle: the deadline drives the tick when no ping is due sooner", "[session][idle]") {
  SessionPair p;
  p.a.config.idle_timeout = 5s;
  p.a.config.ping_interval = 20s;
  p.a.config.liveness_timeout = 30s;
  p.ConnectAndPump();
  const TimePoint ready_at = p.clock.now();
  REQUIRE(p.a.session->NextDeadline().has_value());
  CHECK(*p.a.session->NextDeadline() == ready_at + 5s);
  p.clock.Advance(5s);
  p.a.session->OnTick();
  CHECK(IdleClosed(*p.a.session));
}

TEST_CASE("idle: without work held no idle deadline is armed, and 0 never closes", "[session][idle]") {
  SessionPair p;
  p.a.config.ping_interval = 20s;
  p.a.config.liveness_timeout = 30s;
  p.ConnectAndPump();  // idle_timeout 0: the default
  const TimePoint ready_at = p.clock.now();
  CHECK(*p.a.session->NextDeadline() == ready_at + 20s);  // the ping, nothing sooner
  RunFor(p, 600);
  CHECK(p.a.session->ready());
  CHECK(p.b.session->ready());
}

TEST_CASE("idle: any frame but ping and pong restarts the quiet time", "[session][idle]") {
  SessionPair p;
  p.a.config.idle_timeout = 5s;
  p.ConnectAndPump();
  RunFor(p, 3);
  SECTION("sent: a lookup and the finish that ends it") {
    ProbeNow(*p.a.session, "r", "k1");
    p.pipe.Pump();
    p.a.session->Finish("r");  // the terminal empty fetch goes out now
    p.pipe.Pump();
  }
  SECTION("received: the peer's lookup, answered at once") {
    ProbeNow(*p.b.session, "r", "k1");
    p.pipe.Pump();
    p.b.session->Finish("r");
    p.pipe.Pump();
  }
  RunFor(p, 4);  // 7 s since the handshake, 4 s since the work
  CHECK(p.a.session->ready());
  RunFor(p, 1);
  CHECK(IdleClosed(*p.a.session));
}

TEST_CASE("idle: work held by either role keeps the session open", "[session][idle]") {
  SessionPair p;
  p.a.config.client.load_timeout = 60s;
  p.b.config.server.store_timeout = 60s;
  PublishOne(p.b, "k1");
  // Only the end that holds the work has the timeout: the other holds none.
  const auto connect_with_timeout_at = [&p](TestNode& holder) {
    holder.config.idle_timeout = 2s;
    p.ConnectAndPump();
  };
  SECTION("client: a load in flight (the peer has no supply for it yet)") {
    connect_with_timeout_at(p.a);
    REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k1"}, {0}, p.a.region->Sink()).ok());
  }
  SECTION("client: a lookup round with a hit not fetched yet") {
    connect_with_timeout_at(p.a);
    ProbeNow(*p.a.session, "r", "k1");
  }
  SECTION("client: a probe not flushed yet") {
    connect_with_timeout_at(p.a);
    CHECK(p.a.session->RegisterLookup("r", "k1") == ProbeAnswer::kRetry);
  }
  SECTION("server: an open lookup round holding a pinned hit") {
    connect_with_timeout_at(p.b);
    ProbeNow(*p.a.session, "r", "k1");
  }
  SECTION("server: a disaggregated fetch waiting for supply") {
    connect_with_timeout_at(p.b);
    REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k1"}, {0}, p.a.region->Sink()).ok());
  }
  SECTION("server: a store job no fetch has taken yet") {
    connect_with_timeout_at(p.b);
    p.b.session->AddSupply(7, "pd", {"k1"}, {p.b.region->Pin(3)});
  }
  p.pipe.Pump();
  RunFor(p, 20);  // ten idle timeouts
  CHECK(p.a.session->ready());
  CHECK(p.b.session->ready());
}

TEST_CASE("idle: the quiet time starts when held work ends, not at the last frame", "[session][idle]") {
  SessionPair p;
  p.b.config.idle_timeout = 5s;
  p.b.config.server.round_timeout = 10s;
  PublishOne(p.b, "k1");
  p.ConnectAndPump();
  ProbeNow(*p.a.session, "r", "k1");
  p.pipe.Pump();
  RunFor(p, 10);  // the round expires now, without a frame
  CHECK(p.b.session->RoundsOpen() == 0);
  RunFor(p, 3);
  CHECK(p.b.session->ready());  // 13 s since the last frame, 3 s without work
  RunFor(p, 2);
  CHECK(IdleClosed(*p.b.session));
  CHECK(p.a.session->peer_disconnect_reason() == PeerDisconnectReason::kIdle);
}

}  // namespace
}  // namespace kvpeer::session::testing

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;

// A transfer_done queued behind a large data frame that takes longer than
// the timeout to write: the roles hold nothing, but the transport does.
TEST_CASE("idle: frames still waiting to be written keep the session open", "[session][idle]") {
  SessionPair p;
  p.a.config.idle_timeout = 5s;
  p.ConnectAndPump();
  for (int i = 0; i < 20; ++i) {  // four timeouts, the transport busy throughout
    p.clock.Advance(1s);
    p.a.session->NoteWritesPending();
    p.Tick();
    p.pipe.Pump();
    REQUIRE(p.a.session->ready());
  }
  for (int i = 0; i < 5; ++i) {  // written: the quiet time starts now
    p.clock.Advance(1s);
    p.Tick();
    p.pipe.Pump();
  }
  CHECK(p.a.session->state() == PeerSession::State::kClosed);
  CHECK(p.a.session->close_cause() == CloseCause::kIdle);
}

}  // namespace
}  // namespace kvpeer::session::testing
