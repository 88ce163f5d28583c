// The session-level edge cases (E52-E70 of docs/edge-cases.md), one
// TEST_CASE each, run through two real PeerSessions.
//
// Not applicable here, and why:
// * E57 (double finalize after a failed immediate write_blocks): there is no
//   fallible asynchronous submit in our design; the server role pulls frames
//   (ProduceDataFrame) and finalizes each round once, covered by its own tests.
// * E63 (ZMQ transport): no ZMQ; the daemon's TCP connection code owns
//   sockets, ordering and reconnects.
// * E65 (NIXL data transport): block data travels on the same TCP
//   connection; there is no separate data transport to register peers with.
// * E64, E66, E67: manager behaviour lives in the daemon; only their
//   session-level parts are tested below.
// * E54's "internal handler error tolerated 4 times": roles report errors as
//   Status values, never exceptions, and every non-ok Status closes the
//   session, so there is no consecutive-error counter.
// * E55's send failure: SendFn cannot fail; the daemon's writer calls
//   Close(reason, false) on a write error, which is what E55 tests.
#include <catch2/catch.hpp>

#include <algorithm>

#include "session/peer_session.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using State = PeerSession::State;

void PublishFilled(TestNode& node, const protocol::Key& key, uint32_t block, uint64_t seed) {
  node.region->Fill(block, seed);
  node.index.Publish(key, block);
}

bool SameBytes(std::span<const uint8_t> x, std::span<const uint8_t> y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}

template <typename T>
size_t CountDelivered(const SessionPipe& pipe, SessionPipe::Side to) {
  const auto& got = pipe.Delivered(to);
  return static_cast<size_t>(
      std::count_if(got.begin(), got.end(), [](const protocol::Message& m) { return std::holds_alternative<T>(m); }));
}

// Advances the clock in 1 s steps, ticking and pumping, so liveness holds.
void RunFor(SessionPair& p, int seconds) {
  for (int i = 0; i < seconds; ++i) {
    p.clock.Advance(1s);
    p.Tick();
    p.pipe.Pump();
  }
}

// Symmetric probe of `keys` by A on B for `kv`, answered.
void Probe(SessionPair& p, const std::string& kv, const std::vector<protocol::Key>& keys) {
  for (const auto& key : keys) p.a.session->RegisterLookup(kv, key);
  p.a.session->FlushPendingLookups();
  p.pipe.Pump();
  for (const auto& key : keys) REQUIRE(p.a.session->RegisterLookup(kv, key) == ProbeAnswer::kHit);
}

TEST_CASE("E52 handshake rejects block_len, fingerprint and hash seed mismatches", "[session]") {
  // Unlike the seed (silent mark-dead), spec section 4 answers a rejected
  // connect with disconnect naming the field; see also E70.
  SessionPair p;
  SECTION("block_len") {
    p.b.config.block_len = 4096;
    p.ConnectAndPump();
    CHECK(p.a.session->close_reason() == "block_len mismatch: ours 64, peer 4096");
  }
  SECTION("fingerprints differ") {
    p.b.config.config_fingerprint = "fp-other";
    p.ConnectAndPump();
    CHECK(p.a.session->close_reason() == "config_fingerprint mismatch: ours \"fp-1\", peer \"fp-other\"");
  }
  SECTION("one fingerprint empty: no wildcard (hardened exact equality)") {
    p.b.config.config_fingerprint = "";
    p.ConnectAndPump();
    CHECK(p.a.session->close_reason() == "config_fingerprint mismatch: ours \"fp-1\", peer \"\"");
  }
  SECTION("hash seed") {
    p.b.config.hash_seed = "seed-1";
    p.ConnectAndPump();
    CHECK(p.a.session->close_reason() == "hash_seed mismatch");
  }
  CHECK(p.a.session->state() == State::kClosed);
  CHECK(p.b.session->state() == State::kClosed);
  CHECK(CountDelivered<protocol::ConnectAck>(p.pipe, SessionPipe::kB) == 0);  // A never acked
}

TEST_CASE("E52 both fingerprints empty are accepted and the hash seed is advertised", "[session]") {
  SessionPair p;
  p.a.config.config_fingerprint = "";
  p.b.config.config_fingerprint = "";
  p.ConnectAndPump();
  CHECK(p.a.session->ready());
  CHECK(std::get<protocol::Connect>(p.pipe.Delivered(SessionPipe::kB)[0]).hash_seed == "seed-0");
}

// E53, as wire spec 1.1 section 4 step 5 hardens it: a second connect_ack
// is a violation too (the seed ignored an identical one).
TEST_CASE("E53 connect after ready is a violation, and so is a second connect_ack", "[session]") {
  SECTION("second connect_ack") {
    SessionPair p;
    p.ConnectAndPump();
    const auto ack_from_a = std::get<protocol::ConnectAck>(p.pipe.Delivered(SessionPipe::kB)[1]);
    CHECK(p.b.session->OnMessage(ack_from_a).code() == Status::Code::kViolation);
    CHECK(p.b.session->close_reason() == "second connect_ack");
  }
  SessionPair p;
  p.ConnectAndPump();
  CHECK(p.b.session->ready());
  const auto connect_from_a = std::get<protocol::Connect>(p.pipe.Delivered(SessionPipe::kB)[0]);
  CHECK(p.b.session->OnMessage(connect_from_a).code() == Status::Code::kViolation);
  CHECK(p.b.session->close_reason() == "connect after handshake");
  p.pipe.Pump();
  CHECK(p.a.session->close_reason() == "peer disconnected: connect after handshake");
}

TEST_CASE("E54 unknown types are ignored; a validation failure disconnects", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  CHECK(p.b.session->OnMessage(protocol::Unknown{"telemetry"}).ok());
  CHECK(p.b.session->ready());
  CHECK(p.b.session->counters().unknown_types == 1);
  // A duplicate fetch for a round with demand (E32) is a violation by the peer.
  const protocol::Fetch fetch{"pd", {"k1"}, {0}, 7};
  REQUIRE(p.b.session->OnMessage(fetch).ok());
  const Status s = p.b.session->OnMessage(fetch);
  CHECK(s.code() == Status::Code::kViolation);
  CHECK(p.b.session->state() == State::kClosed);
  p.pipe.Pump();
  CHECK(p.a.session->close_reason() == "peer disconnected: " + s.message());
}

TEST_CASE("E55 a write failure closes the session and fails its work", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k1"}, {0}, p.a.region->Sink()).ok());
  const size_t queued = p.pipe.Queued(SessionPipe::kA);
  // What the daemon does.
  p.a.session->Close(CloseCause::kConnectionLost, "write failed: broken pipe", /*notify_peer=*/false);
  CHECK(p.pipe.Queued(SessionPipe::kA) == queued);
  const SessionResults r = p.a.session->TakeResults();
  REQUIRE(r.loads.size() == 1);
  CHECK_FALSE(r.loads[0].success);
  CHECK(r.loads[0].reason == "write failed: broken pipe");
  CHECK(r.failed_request_ids == std::vector<std::string>{"pd"});
}

TEST_CASE("E56 round tokens are never reused, even after a request is pruned", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  auto& a = *p.a.session;
  a.RegisterLookup("r", "k1");
  a.FlushPendingLookups();
  p.pipe.Pump();
  a.Finish("r");
  p.pipe.Pump();
  a.RegisterLookup("r", "k1");  // the same id again, state long pruned
  a.FlushPendingLookups();
  p.pipe.Pump();
  std::vector<protocol::RoundSeq> rounds;
  for (const auto& m : p.pipe.Delivered(SessionPipe::kB))
    if (const auto* l = std::get_if<protocol::Lookup>(&m)) rounds.push_back(l->round_seq);
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[1] > rounds[0]);
}

TEST_CASE("E58 Close surfaces store results queued before it", "[session]") {
  SessionPair p;
  PublishFilled(p.b, "k1", 3, 33);
  p.ConnectAndPump();
  p.b.session->AddSupply(7, "pd", {"k1"}, {p.b.region->Pin(3)});
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k1"}, {20}, p.a.region->Sink()).ok());
  p.pipe.Pump();
  p.b.session->Close(CloseCause::kShutdown, "shutdown");  // its store result was not taken yet
  const SessionResults r = p.b.session->TakeResults();
  REQUIRE(r.stores.size() == 1);
  CHECK(r.stores[0].job_id == 7);
  CHECK(r.stores[0].success);
  CHECK(p.b.session->TakeResults().stores.empty());
  CHECK(p.b.region->total_live_pins() == 0);
}

TEST_CASE("E59 disaggregated prefill with two fetches for one request", "[session]") {
  SessionPair p;
  p.b.region->Fill(1, 11);
  p.b.region->Fill(2, 22);
  p.ConnectAndPump();
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k1"}, {30}, p.a.region->Sink()).ok());
  REQUIRE(p.a.session->RequestBlocks(2, "pd", {"k2"}, {31}, p.a.region->Sink()).ok());
  p.pipe.Pump();
  // Supply in the other order: each binds to the round that demands it.
  p.b.session->AddSupply(10, "pd", {"k2"}, {p.b.region->Pin(2)});
  p.b.session->AddSupply(11, "pd", {"k1"}, {p.b.region->Pin(1)});
  p.pipe.Pump();
  const SessionResults ra = p.a.session->TakeResults();
  REQUIRE(ra.loads.size() == 2);
  for (const auto& l : ra.loads) CHECK(l.success);
  CHECK(SameBytes(p.a.region->Block(30), p.b.region->Block(1)));
  CHECK(SameBytes(p.a.region->Block(31), p.b.region->Block(2)));
  const SessionResults rb = p.b.session->TakeResults();
  CHECK(rb.stores.size() == 2);
  CHECK(rb.new_fetch_ids == std::vector<std::string>{"pd"});
  CHECK(p.b.region->total_live_pins() == 0);
}

TEST_CASE("E60 terminal empty fetch while an earlier round is still sending", "[session]") {
  SessionPair p;
  for (uint32_t i = 0; i < 6; ++i) PublishFilled(p.b, "k" + std::to_string(i), i, 100 + i);
  p.b.config.server.max_frame_payload = kBlockLen;  // one block per frame
  p.ConnectAndPump();
  auto& a = *p.a.session;
  const std::vector<protocol::Key> keys = {"k0", "k1", "k2", "k3"};
  Probe(p, "r", keys);
  for (uint32_t i = 40; i < 44; ++i) p.a.region->Fill(i, 9999);  // poison
  REQUIRE(a.RequestBlocks(1, "r", keys, {40, 41, 42, 43}, p.a.region->Sink()).ok());
  p.pipe.Step(SessionPipe::kA);  // the fetch reaches B
  p.pipe.Step(SessionPipe::kB);  // B produces one block
  p.pipe.Step(SessionPipe::kB);  // and it lands
  a.RegisterLookup("r", "k5");   // a new round opens
  a.FlushPendingLookups();
  a.Finish("r");  // abort_fetch for round 1 and the terminal empty fetch
  const SessionResults r = a.TakeResults();
  REQUIRE(r.loads.size() == 1);
  CHECK_FALSE(r.loads[0].success);
  p.pipe.Pump();
  CHECK(a.TakeResults().loads.empty());
  // Only the block that landed before the result was written.
  CHECK(SameBytes(p.a.region->Block(40), p.b.region->Block(0)));
  p.a.region->Fill(44, 9999);
  for (uint32_t i = 41; i < 44; ++i) CHECK(SameBytes(p.a.region->Block(i), p.a.region->Block(44)));
  CHECK(p.b.region->total_live_pins() == 0);
  CHECK(p.b.session->RoundsServing() == 0);
  CHECK(a.ready());
}

// E61, plus requests holding hits they never loaded: those pins die with
// the session (docs/edge-cases.md, "Round tokens, exactly once, close";
// docs/control-api.md, "`poll` and long polls").
TEST_CASE("E61 close results: in-flight loads, unresolved probes, unloaded hits, every store", "[session]") {
  SessionPair p;
  PublishFilled(p.b, "k1", 1, 1);
  p.ConnectAndPump();
  auto& a = *p.a.session;
  Probe(p, "resolved", {"k1"});      // a resolved hit, never loaded: reported
  a.RegisterLookup("missed", "k7");  // resolved as a miss: not reported
  a.FlushPendingLookups();
  p.pipe.Pump();
  REQUIRE(a.RegisterLookup("missed", "k7") == ProbeAnswer::kMiss);
  a.RegisterLookup("unresolved", "k2");  // registered, flushed, never answered
  a.FlushPendingLookups();
  REQUIRE(a.RequestBlocks(1, "load-1", {"x"}, {0}, p.a.region->Sink()).ok());
  REQUIRE(a.RequestBlocks(2, "load-2", {"y"}, {1}, p.a.region->Sink()).ok());
  a.AddSupply(50, "b-request", {"k9"}, {p.a.region->Pin(9)});
  a.AddSupply(51, "b-request-2", {"k8"}, {p.a.region->Pin(8)});
  a.Close(CloseCause::kPeerRestarted, "peer restarted");
  SessionResults r = a.TakeResults();
  std::vector<JobId> loads, stores;
  for (const auto& l : r.loads) loads.push_back(l.job_id);
  for (const auto& s : r.stores) stores.push_back(s.job_id);
  std::sort(loads.begin(), loads.end());
  std::sort(stores.begin(), stores.end());
  std::sort(r.failed_request_ids.begin(), r.failed_request_ids.end());
  CHECK(loads == std::vector<JobId>{1, 2});
  CHECK(stores == std::vector<JobId>{50, 51});
  CHECK(r.failed_request_ids == std::vector<std::string>{"load-1", "load-2", "resolved", "unresolved"});
  for (const auto& s : r.stores) CHECK_FALSE(s.success);
  CHECK(p.a.region->total_live_pins() == 0);
  a.Close(CloseCause::kShutdown, "again");
  const SessionResults again = a.TakeResults();
  CHECK(again.loads.empty());
  CHECK(again.stores.empty());
  CHECK(again.failed_request_ids.empty());
}

TEST_CASE("E61 a session closed before the handshake fails its buffered work only", "[session]") {
  SessionPair p;
  p.Connect();
  p.a.session->AddSupply(60, "b-req", {"k"}, {p.a.region->Pin(0)});
  p.a.session->Close(CloseCause::kConnectFailed, "dial failed", false);
  const SessionResults r = p.a.session->TakeResults();
  CHECK(r.loads.empty());
  REQUIRE(r.stores.size() == 1);
  CHECK_FALSE(r.stores[0].success);
}

TEST_CASE("E62 one session serves a fetch and completes its own load in the same step", "[session]") {
  SessionPair p;
  PublishFilled(p.a, "ka", 5, 55);
  PublishFilled(p.b, "kb", 6, 66);
  p.ConnectAndPump();
  p.a.session->RegisterLookup("from-b", "kb");
  p.b.session->RegisterLookup("from-a", "ka");
  p.a.session->FlushPendingLookups();
  p.b.session->FlushPendingLookups();
  p.pipe.Pump();
  REQUIRE(p.a.session->RegisterLookup("from-b", "kb") == ProbeAnswer::kHit);
  REQUIRE(p.b.session->RegisterLookup("from-a", "ka") == ProbeAnswer::kHit);
  REQUIRE(p.a.session->RequestBlocks(1, "from-b", {"kb"}, {50}, p.a.region->Sink()).ok());
  REQUIRE(p.b.session->RequestBlocks(2, "from-a", {"ka"}, {51}, p.b.region->Sink()).ok());
  p.pipe.Pump();
  const SessionResults ra = p.a.session->TakeResults();
  const SessionResults rb = p.b.session->TakeResults();
  REQUIRE(ra.loads.size() == 1);
  REQUIRE(rb.loads.size() == 1);
  CHECK(ra.loads[0].success);
  CHECK(rb.loads[0].success);
  CHECK(SameBytes(p.a.region->Block(50), p.b.region->Block(6)));
  CHECK(SameBytes(p.b.region->Block(51), p.a.region->Block(5)));
}

TEST_CASE("E64 session parts: store before fetch is parked and served; a dead peer fails work at once", "[session]") {
  SessionPair p;
  p.b.region->Fill(4, 44);
  p.ConnectAndPump();
  p.b.session->AddSupply(70, "pd", {"k4"}, {p.b.region->Pin(4)});
  p.pipe.Pump();
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k4"}, {12}, p.a.region->Sink()).ok());
  p.pipe.Pump();
  const SessionResults ra = p.a.session->TakeResults();
  REQUIRE(ra.loads.size() == 1);
  CHECK(ra.loads[0].success);
  CHECK(SameBytes(p.a.region->Block(12), p.b.region->Block(4)));
  p.a.session->Close(CloseCause::kOperator, "peer gone");
  CHECK(p.a.session->RegisterLookup("r", "k") == ProbeAnswer::kMiss);
  CHECK(p.a.session->RequestBlocks(2, "pd2", {"k4"}, {13}, p.a.region->Sink()).code() == Status::Code::kUnavailable);
}

TEST_CASE("E66 session part: fetching request ids are reported once, not accumulated", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k1"}, {0}, p.a.region->Sink()).ok());
  REQUIRE(p.a.session->RequestBlocks(2, "pd", {"k2"}, {1}, p.a.region->Sink()).ok());
  p.a.session->RegisterLookup("sym", "k3");
  p.a.session->FlushPendingLookups();
  p.a.session->Finish("sym");  // the terminal empty fetch
  p.pipe.Pump();
  std::vector<std::string> ids = p.b.session->TakeResults().new_fetch_ids;
  std::sort(ids.begin(), ids.end());
  CHECK(std::count(ids.begin(), ids.end(), "pd") == 1);
  CHECK(p.b.session->TakeResults().new_fetch_ids.empty());
}

TEST_CASE("E67 session part: Finish ends a request in both roles", "[session]") {
  SessionPair p;
  p.a.region->Fill(1, 11);
  p.ConnectAndPump();
  // "x" is both a load A makes from B and a load B makes from A.
  REQUIRE(p.a.session->RequestBlocks(1, "x", {"kb"}, {20}, p.a.region->Sink()).ok());
  REQUIRE(p.b.session->RequestBlocks(2, "x", {"k1", "k2"}, {20, 21}, p.b.region->Sink()).ok());
  p.pipe.Pump();
  p.a.session->AddSupply(80, "x", {"k1"}, {p.a.region->Pin(1)});  // k2 never comes
  p.a.session->Finish("x");
  p.pipe.Pump();
  const SessionResults ra = p.a.session->TakeResults();
  const SessionResults rb = p.b.session->TakeResults();
  REQUIRE(ra.loads.size() == 1);
  CHECK_FALSE(ra.loads[0].success);
  REQUIRE(ra.stores.size() == 1);
  CHECK(ra.stores[0].job_id == 80);
  REQUIRE(rb.loads.size() == 1);  // the producer's finish ended B's load
  CHECK_FALSE(rb.loads[0].success);
  CHECK(p.a.region->total_live_pins() == 0);
}

TEST_CASE("E68 a fetch after its store timed out waits for the load timeout, one result each", "[session]") {
  SessionPair p;
  p.a.config.client.load_timeout = 4s;
  p.b.config.server.store_timeout = 3s;
  p.ConnectAndPump();
  p.b.session->AddSupply(90, "pd", {"k1"}, {p.b.region->Pin(1)});
  RunFor(p, 3);
  SessionResults rb = p.b.session->TakeResults();
  REQUIRE(rb.stores.size() == 1);
  CHECK_FALSE(rb.stores[0].success);
  REQUIRE(p.a.session->RequestBlocks(1, "pd", {"k1"}, {0}, p.a.region->Sink()).ok());
  RunFor(p, 3);
  CHECK(p.a.session->TakeResults().loads.empty());
  RunFor(p, 2);
  const SessionResults ra = p.a.session->TakeResults();
  REQUIRE(ra.loads.size() == 1);
  CHECK_FALSE(ra.loads[0].success);
  RunFor(p, 15);
  CHECK(p.a.session->TakeResults().loads.empty());
  CHECK(p.b.session->TakeResults().stores.empty());
  CHECK(p.b.region->total_live_pins() == 0);
  CHECK(p.a.session->ready());
}

TEST_CASE("E69 a session not ready within the handshake timeout closes and fails its queued work", "[session]") {
  SessionPair p;
  p.Connect();  // B's frames are never delivered
  auto& a = *p.a.session;
  REQUIRE(a.RequestBlocks(1, "pd", {"k1"}, {0}, p.a.region->Sink()).ok());
  a.RegisterLookup("sym", "k2");
  a.FlushPendingLookups();
  p.clock.Advance(9999ms);
  a.OnTick();
  CHECK(a.state() == State::kHandshaking);
  p.clock.Advance(1ms);
  a.OnTick();
  CHECK(a.state() == State::kClosed);
  CHECK(a.close_reason() == "handshake timed out");
  CHECK(std::get<protocol::Disconnect>(p.pipe.Outbox(SessionPipe::kA).back().message).reason == "handshake timed out");
  SessionResults r = a.TakeResults();
  REQUIRE(r.loads.size() == 1);
  CHECK_FALSE(r.loads[0].success);
  std::sort(r.failed_request_ids.begin(), r.failed_request_ids.end());
  CHECK(r.failed_request_ids == std::vector<std::string>{"pd", "sym"});
  // Only connect and disconnect went out: the queued lookup and fetch died with it.
  CHECK(p.pipe.Queued(SessionPipe::kA) == 3);  // connect, ping, disconnect
}

TEST_CASE("E70 a rejected connect is answered by disconnect; a valid one after ready is a violation", "[session]") {
  // Deliberate difference from the seed: spec section 4 requires the
  // disconnect with a reason naming the field instead of silence.
  SessionPair p;
  SECTION("rejected connect") {
    p.b.config.hash_seed = "seed-2";
    p.Connect();
    p.pipe.Step(SessionPipe::kA);  // only A's connect reaches B
    const auto& from_b = p.pipe.Outbox(SessionPipe::kB);
    REQUIRE(from_b.size() == 2);  // B's own connect, then its answer
    CHECK(std::get<protocol::Disconnect>(from_b[1].message).reason == "hash_seed mismatch");
    CHECK(p.b.session->state() == State::kClosed);
  }
  SECTION("valid connect after ready") {
    p.ConnectAndPump();
    const auto connect = std::get<protocol::Connect>(p.pipe.Delivered(SessionPipe::kA)[0]);
    CHECK(p.a.session->OnMessage(connect).code() == Status::Code::kViolation);
    p.pipe.Pump();
    CHECK(p.b.session->close_reason() == "peer disconnected: connect after handshake");
  }
}

}  // namespace
}  // namespace kvpeer::session::testing
