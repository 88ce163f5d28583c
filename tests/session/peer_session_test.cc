// PeerSession: handshake, authentication, send gating, dispatch, liveness
// and close, through the real ClientRole and ServerRole.
#include <catch2/catch.hpp>

#include "session/peer_session.h"
#include "session/psk_proof.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using protocol::Message;
using State = PeerSession::State;

// One session whose peer is played by the test, frame by frame.
struct LoneSession {
  explicit LoneSession(std::string expected_peer = "node-b:7000") : node("node-a:7000", 1) {
    Make(std::move(expected_peer));
  }

  void Make(std::string expected_peer) {
    log.Clear();
    session = std::make_unique<PeerSession>(node.config, clock.AsClock(), log.AsSend(), node.index,
                                            std::move(expected_peer));
    session->Start();
  }

  protocol::Connect PeerConnect() const {
    protocol::Connect c;
    c.peer_id = "node-b:7000";
    c.epoch = Token(2);
    c.block_len = kBlockLen;
    c.config_fingerprint = "fp-1";
    c.hash_seed = "seed-0";
    c.nonce = Token(77);
    return c;
  }

  protocol::ConnectAck PeerAck() const {
    protocol::ConnectAck ack;
    ack.peer_id = "node-b:7000";
    ack.epoch = Token(2);
    return ack;
  }

  const protocol::Connect& OurConnect() const { return std::get<protocol::Connect>(log.frames.at(0).message); }

  void MakeReady() {
    REQUIRE(session->OnMessage(PeerConnect()).ok());
    REQUIRE(session->OnMessage(PeerAck()).ok());
    REQUIRE(session->ready());
  }

  const Message& Last() const { return log.frames.back().message; }
  std::string LastDisconnectReason() const {
    const auto* d = std::get_if<protocol::Disconnect>(&Last());
    return d && d->reason ? *d->reason : "<no disconnect>";
  }

  FakeClock clock;
  FrameLog log;
  TestNode node;
  std::unique_ptr<PeerSession> session;
};

// Publishes `key` on `node` at `block`, filled with a pattern from `seed`.
void PublishFilled(TestNode& node, const protocol::Key& key, uint32_t block, uint64_t seed) {
  node.region->Fill(block, seed);
  node.index.Publish(key, block);
}

bool SameBytes(std::span<const uint8_t> x, std::span<const uint8_t> y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}

TEST_CASE("Start sends exactly our connect, ungated", "[session]") {
  LoneSession t;
  REQUIRE(t.log.frames.size() == 1);
  const auto& c = t.OurConnect();
  CHECK(c.peer_id == "node-a:7000");
  CHECK(c.wire_major == 1);
  CHECK(c.wire_minor == 0);
  CHECK(c.epoch == t.node.config.epoch);
  CHECK(c.block_len == kBlockLen);
  CHECK(c.config_fingerprint == "fp-1");
  CHECK(c.hash_seed == "seed-0");
  CHECK(c.nonce.size() == 32);
  CHECK(t.session->state() == State::kHandshaking);
  CHECK(t.session->dialled_locally());
  CHECK(t.session->peer_id() == "node-b:7000");
  t.session->Start();  // a second Start sends nothing
  CHECK(t.log.frames.size() == 1);
}

TEST_CASE("nonces are fresh per connection, from the CSPRNG when no source is configured", "[session]") {
  LoneSession t;
  t.node.config.random_token = nullptr;
  t.Make("node-b:7000");
  const std::string first = t.OurConnect().nonce;
  t.Make("node-b:7000");
  const std::string second = t.OurConnect().nonce;
  CHECK(first.size() == 32);
  CHECK(first != second);
  CHECK(first.find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("handshake succeeds on both sides through a pipe", "[session]") {
  SessionPair p;
  p.ConnectAndPump();
  CHECK(p.a.session->ready());
  CHECK(p.b.session->ready());
  CHECK(p.a.session->peer_id() == p.b.id);
  CHECK(p.b.session->peer_id() == p.a.id);  // accepted: learnt from the connect
  CHECK_FALSE(p.b.session->dialled_locally());
  REQUIRE(p.b.session->peer_connect().has_value());
  CHECK(p.b.session->peer_connect()->epoch == p.a.config.epoch);
  CHECK(p.a.session->close_reason().empty());
  // Each side received connect then connect_ack, and nothing else.
  for (auto side : {SessionPipe::kA, SessionPipe::kB}) {
    const auto& got = p.pipe.Delivered(side);
    REQUIRE(got.size() == 2);
    CHECK(std::holds_alternative<protocol::Connect>(got[0]));
    CHECK(std::holds_alternative<protocol::ConnectAck>(got[1]));
    CHECK(std::get<protocol::ConnectAck>(got[1]).epoch == (side == SessionPipe::kA ? p.b : p.a).config.epoch);
  }
  CHECK(p.a.session->counters().frames_sent == 2);
  CHECK(p.a.session->counters().frames_received == 2);
}

TEST_CASE("the connect_ack goes out at once, before the peer's ack", "[session]") {
  LoneSession t;
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  REQUIRE(t.log.frames.size() == 2);
  const auto& ack = std::get<protocol::ConnectAck>(t.Last());
  CHECK(ack.peer_id == "node-a:7000");
  CHECK(ack.epoch == t.node.config.epoch);
  CHECK(ack.wire_major == 1);
  CHECK_FALSE(ack.proof.has_value());
  CHECK_FALSE(t.session->ready());
}

struct MismatchCase {
  const char* name;
  std::function<void(protocol::Connect&)> mutate;
  std::string reason;
};

TEST_CASE("a connect with different settings is answered by disconnect naming the field", "[session]") {
  // Spec section 4: the field and both values are named (only the field for
  // hash_seed), unlike the seed, which closed silently (E70).
  const std::vector<MismatchCase> cases = {
      {"wire_major", [](protocol::Connect& c) { c.wire_major = 2; }, "wire_major mismatch: ours 1, peer 2"},
      {"block_len", [](protocol::Connect& c) { c.block_len = 4096; }, "block_len mismatch: ours 64, peer 4096"},
      {"config_fingerprint", [](protocol::Connect& c) { c.config_fingerprint = "fp-2"; },
       "config_fingerprint mismatch: ours \"fp-1\", peer \"fp-2\""},
      {"empty fingerprint", [](protocol::Connect& c) { c.config_fingerprint = ""; },
       "config_fingerprint mismatch: ours \"fp-1\", peer \"\""},
      {"hash_seed", [](protocol::Connect& c) { c.hash_seed = "seed-9"; }, "hash_seed mismatch"},
      {"peer_id", [](protocol::Connect& c) { c.peer_id = "node-c:7000"; },
       "peer_id mismatch: dialled \"node-b:7000\", peer says \"node-c:7000\""},
      {"own epoch", [](protocol::Connect& c) { c.epoch = Token(1); },
       "connect.epoch equals ours (a connection to ourselves, or a reflected connect)"},
  };
  for (const auto& mc : cases) {
    SECTION(mc.name) {
      LoneSession t;
      protocol::Connect c = t.PeerConnect();
      mc.mutate(c);
      const Status s = t.session->OnMessage(c);
      CHECK(s.code() == Status::Code::kViolation);
      CHECK(t.LastDisconnectReason() == mc.reason);
      CHECK(t.session->close_reason() == mc.reason);
      CHECK(t.session->state() == State::kClosed);
      CHECK(t.log.Count<protocol::ConnectAck>() == 0);
      CHECK_FALSE(t.session->peer_connect().has_value());
    }
  }
}

TEST_CASE("hash_seed mismatch never prints either seed", "[session]") {
  LoneSession t;
  protocol::Connect c = t.PeerConnect();
  c.hash_seed = "their-secret-seed";
  (void)t.session->OnMessage(c);
  CHECK(t.LastDisconnectReason().find("seed-0") == std::string::npos);
  CHECK(t.LastDisconnectReason().find("their-secret") == std::string::npos);
}

TEST_CASE("an accepted connection takes any peer_id and reports it", "[session]") {
  LoneSession t("");
  protocol::Connect c = t.PeerConnect();
  c.peer_id = "node-z:9";
  REQUIRE(t.session->OnMessage(c).ok());
  CHECK(t.session->peer_id() == "node-z:9");
  protocol::ConnectAck ack = t.PeerAck();
  ack.peer_id = "node-z:9";
  REQUIRE(t.session->OnMessage(ack).ok());
  CHECK(t.session->ready());
}

TEST_CASE("a long fingerprint is cut so the reason fits on the wire", "[session]") {
  LoneSession t;
  protocol::Connect c = t.PeerConnect();
  c.config_fingerprint = std::string(4096, 'x');
  t.node.config.config_fingerprint = std::string(4096, 'y');
  t.Make("node-b:7000");
  (void)t.session->OnMessage(c);
  const std::string reason = t.LastDisconnectReason();
  CHECK(reason.rfind("config_fingerprint mismatch: ours \"yyy", 0) == 0);
  CHECK(reason.size() < 1000);
}

TEST_CASE("mismatches through the pipe close both ends", "[session]") {
  SessionPair p;
  p.b.config.block_len = kBlockLen * 2;
  p.ConnectAndPump();
  CHECK(p.a.session->state() == State::kClosed);
  CHECK(p.b.session->state() == State::kClosed);
  CHECK(p.a.session->close_reason() == "block_len mismatch: ours 64, peer 128");
  CHECK(p.b.session->close_reason() == "block_len mismatch: ours 128, peer 64");
}

TEST_CASE("PSK: both ends prove and the handshake completes", "[session]") {
  SessionPair p;
  p.a.config.psk = std::string(32, 'k');
  p.b.config.psk = std::string(32, 'k');
  p.ConnectAndPump();
  REQUIRE(p.a.session->ready());
  REQUIRE(p.b.session->ready());
  const auto& a_got = p.pipe.Delivered(SessionPipe::kA);
  const auto& b_connect = std::get<protocol::Connect>(p.pipe.Delivered(SessionPipe::kB)[0]);
  const auto& ack_from_b = std::get<protocol::ConnectAck>(a_got[1]);
  REQUIRE(ack_from_b.proof.has_value());
  CHECK(*ack_from_b.proof == PskProof(std::string(32, 'k'), b_connect.nonce, b_connect.epoch, p.b.id));
}

TEST_CASE("PSK proof matches an independent HMAC-SHA256 computation", "[session]") {
  // Computed with Python's hmac module over the same bytes.
  CHECK(PskProof(std::string(32, 'k'), Token(1).replace(0, 16, "0000000000000000"), std::string(32, 'a'),
                 "node-b:7000") == "1118a34d747bf1ee413f066ba518796cc7857cfd4d309df0e1dba335b47c5e0f");
  CHECK(ProofsEqual("ab", "ab"));
  CHECK_FALSE(ProofsEqual("ab", "ac"));
  CHECK_FALSE(ProofsEqual("ab", "abc"));
  CHECK_FALSE(ProofsEqual("", ""));
}

TEST_CASE("PSK: a wrong or missing proof fails authentication and nothing else is processed", "[session]") {
  LoneSession t;
  t.node.config.psk = std::string(40, 's');
  t.Make("node-b:7000");
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  // Our ack proves over the peer's connect.
  const auto& our_ack = std::get<protocol::ConnectAck>(t.Last());
  CHECK(our_ack.proof == PskProof(std::string(40, 's'), Token(77), Token(2), "node-a:7000"));
  protocol::ConnectAck ack = t.PeerAck();
  SECTION("missing") {}
  SECTION("wrong key") { ack.proof = PskProof(std::string(40, 'x'), t.OurConnect().nonce, t.OurConnect().epoch, ack.peer_id); }
  SECTION("proof of another nonce") { ack.proof = PskProof(std::string(40, 's'), Token(5), t.OurConnect().epoch, ack.peer_id); }
  SECTION("our own proof reflected") { ack.proof = our_ack.proof; }
  const Status s = t.session->OnMessage(ack);
  CHECK_FALSE(s.ok());
  CHECK(t.LastDisconnectReason() == "authentication failed");
  CHECK(t.session->state() == State::kClosed);
  const size_t sent = t.log.frames.size();
  CHECK(t.session->OnMessage(protocol::Ping{Token(3)}).code() == Status::Code::kUnavailable);
  CHECK(t.log.frames.size() == sent);
}

TEST_CASE("PSK: a correct proof is accepted; a proof we did not ask for is ignored", "[session]") {
  LoneSession t;
  SECTION("with psk") {
    t.node.config.psk = std::string(40, 's');
    t.Make("node-b:7000");
  }
  SECTION("without psk") {}
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  protocol::ConnectAck ack = t.PeerAck();
  ack.proof = PskProof(std::string(40, 's'), t.OurConnect().nonce, t.OurConnect().epoch, "node-b:7000");
  CHECK(t.session->OnMessage(ack).ok());
  CHECK(t.session->ready());
}

TEST_CASE("PSK configured on one side only: authentication fails on that side", "[session]") {
  SessionPair p;
  p.a.config.psk = std::string(32, 'k');
  p.ConnectAndPump();
  CHECK(p.a.session->close_reason() == "authentication failed");
  CHECK(p.b.session->close_reason() == "peer disconnected: authentication failed");
}

TEST_CASE("connect_ack checks: order, identity, repeats", "[session]") {
  LoneSession t;
  SECTION("before the connect") {
    CHECK_FALSE(t.session->OnMessage(t.PeerAck()).ok());
    CHECK(t.LastDisconnectReason() == "connect_ack before connect");
  }
  SECTION("peer_id differs from the connect's") {
    REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
    auto ack = t.PeerAck();
    ack.peer_id = "node-c:1";
    CHECK_FALSE(t.session->OnMessage(ack).ok());
    CHECK(t.LastDisconnectReason() ==
          "connect_ack.peer_id \"node-c:1\" differs from connect.peer_id \"node-b:7000\"");
  }
  SECTION("epoch differs from the connect's") {
    REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
    auto ack = t.PeerAck();
    ack.epoch = Token(9);
    CHECK_FALSE(t.session->OnMessage(ack).ok());
    CHECK(t.LastDisconnectReason().rfind("connect_ack.epoch", 0) == 0);
  }
  SECTION("wire_major") {
    REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
    auto ack = t.PeerAck();
    ack.wire_major = 3;
    CHECK_FALSE(t.session->OnMessage(ack).ok());
    CHECK(t.LastDisconnectReason() == "connect_ack.wire_major mismatch: ours 1, peer 3");
  }
  SECTION("an identical repeat is harmless") {
    t.MakeReady();
    const size_t sent = t.log.frames.size();
    CHECK(t.session->OnMessage(t.PeerAck()).ok());
    CHECK(t.session->ready());
    CHECK(t.log.frames.size() == sent);
  }
  SECTION("a different repeat is a violation") {
    t.MakeReady();
    auto ack = t.PeerAck();
    ack.wire_minor = 1;
    CHECK_FALSE(t.session->OnMessage(ack).ok());
    CHECK(t.LastDisconnectReason() == "connect_ack repeated with different content");
  }
  CHECK((t.session->ready() || t.session->state() == State::kClosed));
}

TEST_CASE("a second connect is a violation, before and after ready", "[session]") {
  LoneSession t;
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  SECTION("after ready") { REQUIRE(t.session->OnMessage(t.PeerAck()).ok()); }
  SECTION("before ready") {}
  CHECK(t.session->OnMessage(t.PeerConnect()).code() == Status::Code::kViolation);
  CHECK(t.LastDisconnectReason() == "connect after handshake");
  CHECK(t.session->state() == State::kClosed);
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
  SECTION("transfer_done") {
    CHECK_FALSE(t.session->OnMessage(protocol::TransferDone{"r", true, 1}).ok());
    CHECK(t.LastDisconnectReason() == "transfer_done before handshake");
  }
  SECTION("block_data") {
    BlockDataPlan plan;
    CHECK(t.session->OnBlockDataHeader(protocol::BlockData{"r", 1, {0}}, &plan).code() ==
          Status::Code::kViolation);
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
  p.pipe.Pump();  // B now holds the demand but never answers again
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
  p.a.session->Close("bye");
  CHECK_FALSE(p.a.session->NextDeadline().has_value());
}

TEST_CASE("unknown message types are ignored and counted", "[session]") {
  LoneSession t;
  CHECK(t.session->OnMessage(protocol::Unknown{"hello_from_v1_1"}).ok());  // also while handshaking
  t.MakeReady();
  CHECK(t.session->OnMessage(protocol::Unknown{"gossip"}).ok());
  CHECK(t.session->counters().unknown_types == 2);
  CHECK(t.session->ready());
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
  t.session->Close("operator request");
  const size_t sent = t.log.frames.size();
  const uint64_t received = t.session->counters().frames_received;
  CHECK(t.session->OnMessage(protocol::Ping{Token(4)}).code() == Status::Code::kUnavailable);
  BlockDataPlan plan;
  CHECK(t.session->OnBlockDataHeader(protocol::BlockData{"r", 1, {0}}, &plan).code() ==
        Status::Code::kUnavailable);
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
    p.a.session->Close("going away");
    p.a.session->Close("again");
    CHECK(p.a.session->close_reason() == "going away");
    REQUIRE(p.pipe.Queued(SessionPipe::kA) == 2);  // connect, disconnect; the fetch was dropped
    CHECK(std::get<protocol::Disconnect>(p.pipe.Outbox(SessionPipe::kA).back().message).reason == "going away");
  }
  SECTION("silent") {
    p.a.session->Close("socket error", /*notify_peer=*/false);
    CHECK(p.pipe.Queued(SessionPipe::kA) == 1);
  }
  SECTION("empty reason") {
    p.a.session->Close("");
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
  t.session->Close(std::string(5000, 'r') + "\xc3\xa9");
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
