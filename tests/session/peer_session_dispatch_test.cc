// PeerSession: send gating until ready, dispatch of inbound messages to the
// roles (unknown types, violations), close, and loads through the real
// ClientRole and ServerRole.
#include <catch2/catch.hpp>
#include <algorithm>
#include <optional>
#include <span>

#include "session/peer_session.h"
#include "protocol/limits.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using protocol::Message;
using State = PeerSession::State;

// Publishes `key` on `node` at `block`, filled with a pattern from `seed`.
void PublishFilled(TestNode& node, const protocol::Key& key, uint32_t block, uint64_t seed) {
  node.region->Fill(block, seed);
  node.index.Publish(key, block);
}

bool SameBytes(std::span<const uint8_t> x, std::span<const uint8_t> y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}

TEST_CASE("role frames are queued until ready, then flushed in order", "[session]") {
  SessionPair p;
  p.Connect();
  auto& a = *p.a.session;
  CHECK(a.RegisterLookup("r1", "k1") == ProbeAnswer::kRetry);
  CHECK(a.FlushPendingLookups() == 1);
  REQUIRE(a.RequestBlocks(1, "pd", {"k2"}, {3}, p.a.region->Sink()).ok());
  CHECK(a.RegisterLookup("r2", "k3") == ProbeAnswer::kRetry);
  CHECK(a.FlushPendingLookups() == 1);
  // Nothing but our connect is on the wire (E20).
  REQUIRE(p.pipe.Queued(SessionPipe::kA) == 1);
  CHECK(std::holds_alternative<protocol::Connect>(p.pipe.Outbox(SessionPipe::kA).front().message));
  CHECK_FALSE(a.HasDataToSend());
  CHECK_FALSE(a.ProduceDataFrame());
  p.pipe.Pump();
  const auto& got = p.pipe.Delivered(SessionPipe::kB);
  REQUIRE(got.size() == 5);
  CHECK(std::get<protocol::Lookup>(got[2]).kv_request_id == "r1");
  CHECK(std::get<protocol::Fetch>(got[3]).kv_request_id == "pd");
  CHECK(std::get<protocol::Lookup>(got[4]).kv_request_id == "r2");
}

TEST_CASE("role messages and block_data before the handshake are violations", "[session]") {
  LoneSession t;
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  SECTION("lookup") {
    CHECK(t.session->OnMessage(protocol::Lookup{"r", {"k"}, 1}).code() == Status::Code::kViolation);
    CHECK(t.LastDisconnectReason() == "lookup before handshake");
  }
  SECTION("fetch") {
    CHECK_FALSE(t.session->OnMessage(protocol::Fetch{"r", {"k"}, {0}, 1}).ok());
    CHECK(t.LastDisconnectReason() == "fetch before handshake");
  }
  SECTION("transfer_done") {
    CHECK_FALSE(t.session->OnMessage(protocol::TransferDone{"r", true, 1}).ok());
    CHECK(t.LastDisconnectReason() == "transfer_done before handshake");
  }
  SECTION("block_data") {
    BlockDataPlan plan;
    CHECK(t.session->OnBlockDataHeader(protocol::BlockData{"r", 1, {0}}, &plan).code() == Status::Code::kViolation);
    CHECK(t.LastDisconnectReason() == "block_data before handshake");
  }
  CHECK(t.session->state() == State::kClosed);
}

TEST_CASE("a message before Start starts the session first", "[session]") {
  FakeClock clock;
  FrameLog log;
  TestNode node("node-a:7000", 1);
  PeerSession s(node.config, clock.AsClock(), log.AsSend(), node.index);
  CHECK_FALSE(s.NextDeadline().has_value());
  s.OnTick();  // not started: nothing to time
  CHECK(log.frames.empty());
  LoneSession peer_model;
  REQUIRE(s.OnMessage(peer_model.PeerConnect()).ok());
  REQUIRE(log.frames.size() == 2);
  CHECK(std::holds_alternative<protocol::Connect>(log.frames[0].message));
  CHECK(std::holds_alternative<protocol::ConnectAck>(log.frames[1].message));
}

TEST_CASE("unknown message types are ignored and counted after ready", "[session]") {
  LoneSession t;
  t.MakeReady();
  CHECK(t.session->OnMessage(protocol::Unknown{"gossip"}).ok());
  CHECK(t.session->OnMessage(protocol::Unknown{"hello_from_v1_2"}).ok());
  CHECK(t.session->counters().unknown_types == 2);
  CHECK(t.session->ready());
}

TEST_CASE("an unknown message type before ready is a violation (1.1 section 2)", "[session]") {
  LoneSession t;
  SECTION("before the connect") {}
  SECTION("after the connect") { REQUIRE(t.session->OnMessage(t.PeerConnect()).ok()); }
  CHECK(t.session->OnMessage(protocol::Unknown{"gossip"}).code() == Status::Code::kViolation);
  CHECK(t.LastDisconnectReason() == "gossip before handshake");
  CHECK(t.session->counters().unknown_types == 0);
  CHECK(t.session->state() == State::kClosed);
}

TEST_CASE("a role's violation sends disconnect with its reason and closes", "[session]") {
  LoneSession t;
  t.MakeReady();
  BlockDataPlan plan;
  const Status s = t.session->OnBlockDataHeader(protocol::BlockData{"nobody", 7, {0}}, &plan);
  CHECK(s.code() == Status::Code::kViolation);
  CHECK(t.LastDisconnectReason() == s.message());
  CHECK(t.session->close_reason() == s.message());
  CHECK(t.session->state() == State::kClosed);
}

TEST_CASE("block_data handed to OnMessage is an internal error that closes", "[session]") {
  LoneSession t;
  t.MakeReady();
  CHECK(t.session->OnMessage(protocol::BlockData{"r", 1, {0}}).code() == Status::Code::kInternal);
  CHECK(t.session->state() == State::kClosed);
}

TEST_CASE("a disconnect closes without answering", "[session]") {
  LoneSession t;
  t.MakeReady();
  const size_t sent = t.log.frames.size();
  SECTION("with a reason") {
    CHECK(t.session->OnMessage(protocol::Disconnect{"shutting down"}).code() == Status::Code::kUnavailable);
    CHECK(t.session->close_reason() == "peer disconnected: shutting down");
  }
  SECTION("without a reason") {
    (void)t.session->OnMessage(protocol::Disconnect{});
    CHECK(t.session->close_reason() == "peer disconnected");
  }
  CHECK(t.log.frames.size() == sent);
  CHECK(t.session->state() == State::kClosed);
}

TEST_CASE("a closed session does nothing and fails new work at once", "[session]") {
  LoneSession t;
  t.MakeReady();
  t.session->Close(CloseCause::kOperator, "operator request");
  const size_t sent = t.log.frames.size();
  const uint64_t received = t.session->counters().frames_received;
  CHECK(t.session->OnMessage(protocol::Ping{Token(4)}).code() == Status::Code::kUnavailable);
  BlockDataPlan plan;
  CHECK(t.session->OnBlockDataHeader(protocol::BlockData{"r", 1, {0}}, &plan).code() == Status::Code::kUnavailable);
  t.session->OnBlockDataComplete(protocol::BlockData{"r", 1, {0}});
  CHECK(t.session->counters().frames_received == received);
  CHECK(t.session->RegisterLookup("r", "k") == ProbeAnswer::kMiss);
  CHECK(t.session->FlushPendingLookups() == 0);
  const Status s = t.session->RequestBlocks(1, "r", {"k"}, {0}, t.node.region->Sink());
  CHECK(s.code() == Status::Code::kUnavailable);
  t.session->AddSupply(9, "r2", {"k"}, {t.node.region->Pin(5)});
  CHECK(t.node.region->total_live_pins() == 0);
  t.session->Finish("r");
  t.session->OnTick();
  CHECK_FALSE(t.session->ProduceDataFrame());
  CHECK_FALSE(t.session->HasDataToSend());
  CHECK(t.log.frames.size() == sent);
  const SessionResults r = t.session->TakeResults();
  CHECK(r.loads.empty());
  REQUIRE(r.stores.size() == 1);
  CHECK(r.stores[0].job_id == 9);
  CHECK_FALSE(r.stores[0].success);
  CHECK(r.stores[0].reason == "session closed: operator request");
}

TEST_CASE("Close is idempotent, notifies when asked and drops queued frames", "[session]") {
  SessionPair p;
  p.Connect();
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k"}, {0}, p.a.region->Sink()).ok());
  SECTION("notify") {
    p.a.session->Close(CloseCause::kOperator, "going away");
    p.a.session->Close(CloseCause::kShutdown, "again");
    CHECK(p.a.session->close_reason() == "going away");
    CHECK(p.a.session->close_cause() == CloseCause::kOperator);  // the first close stays
    REQUIRE(p.pipe.Queued(SessionPipe::kA) == 2);                // connect, disconnect; the fetch was dropped
    CHECK(std::get<protocol::Disconnect>(p.pipe.Outbox(SessionPipe::kA).back().message).reason == "going away");
  }
  SECTION("silent") {
    p.a.session->Close(CloseCause::kConnectionLost, "socket error", /*notify_peer=*/false);
    CHECK(p.pipe.Queued(SessionPipe::kA) == 1);
  }
  SECTION("empty reason") {
    p.a.session->Close(CloseCause::kOperator, "");
    CHECK(p.a.session->close_reason() == "closed");
  }
  const SessionResults r = p.a.session->TakeResults();
  REQUIRE(r.loads.size() == 1);
  CHECK_FALSE(r.loads[0].success);
  p.pipe.Pump();
  CHECK(p.b.session->state() == State::kClosed);
}

TEST_CASE("a long violation reason is capped to the wire limit", "[session]") {
  LoneSession t;
  t.MakeReady();
  t.session->Close(CloseCause::kOperator, std::string(5000, 'r') + "\xc3\xa9");
  const std::string sent = t.LastDisconnectReason();
  CHECK(sent.size() <= 4096);
  CHECK(sent.substr(sent.size() - 3) == "...");
  CHECK(t.session->close_reason().size() == 5002);  // the log keeps it whole
}

TEST_CASE("a symmetric load moves the producer's bytes into the consumer's slots", "[session]") {
  SessionPair p;
  PublishFilled(p.b, "k1", 10, 111);
  PublishFilled(p.b, "k2", 11, 222);
  p.ConnectAndPump();
  auto& a = *p.a.session;
  CHECK(a.RegisterLookup("r", "k1") == ProbeAnswer::kRetry);
  CHECK(a.RegisterLookup("r", "k2") == ProbeAnswer::kRetry);
  CHECK(a.RegisterLookup("r", "k9") == ProbeAnswer::kRetry);
  CHECK(a.FlushPendingLookups() == 1);
  p.pipe.Pump();
  CHECK(a.RegisterLookup("r", "k1") == ProbeAnswer::kHit);
  CHECK(a.RegisterLookup("r", "k2") == ProbeAnswer::kHit);
  CHECK(a.RegisterLookup("r", "k9") == ProbeAnswer::kMiss);
  CHECK(p.b.region->total_live_pins() == 2);  // pinned at probe time
  REQUIRE(a.RequestBlocks(5, "r", {"k2", "k1"}, {40, 41}, p.a.region->Sink()).ok());
  CHECK(a.LoadsInFlight() == 1);
  p.pipe.Pump();
  const SessionResults r = a.TakeResults();
  REQUIRE(r.loads.size() == 1);
  CHECK(r.loads[0].job_id == 5);
  CHECK(r.loads[0].success);
  CHECK(SameBytes(p.a.region->Block(40), p.b.region->Block(11)));
  CHECK(SameBytes(p.a.region->Block(41), p.b.region->Block(10)));
  a.Finish("r");
  p.pipe.Pump();
  CHECK(p.b.region->total_live_pins() == 0);
  CHECK(p.b.session->RoundsServing() == 0);
}

TEST_CASE("ticks reach the roles: the load timeout aborts through the session", "[session]") {
  SessionPair p;
  p.a.config.client.load_timeout = 3s;
  p.ConnectAndPump();
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k"}, {0}, p.a.region->Sink()).ok());
  p.pipe.Pump();
  for (int i = 0; i < 3; ++i) {
    p.clock.Advance(1s);
    p.Tick();
    p.pipe.Pump();
  }
  const SessionResults r = p.a.session->TakeResults();
  REQUIRE(r.loads.size() == 1);
  CHECK_FALSE(r.loads[0].success);
  const auto& b_got = p.pipe.Delivered(SessionPipe::kB);
  CHECK(std::any_of(b_got.begin(), b_got.end(),
                    [](const Message& m) { return std::holds_alternative<protocol::AbortFetch>(m); }));
  CHECK(p.a.session->ready());
}

}  // namespace
}  // namespace kvpeer::session::testing
