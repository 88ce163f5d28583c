// PeerSession: the handshake (connect, connect_ack, nonces, settings
// mismatches, features, inbound limits), through the real ClientRole and
// ServerRole. Authentication, gating, liveness and close have files of
// their own (peer_session_*_test.cc).
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>

#include "base/random_token.h"

#include "session/peer_session.h"
#include "protocol/limits.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using protocol::Message;
using State = PeerSession::State;

TEST_CASE("Start sends exactly our connect, ungated", "[session]") {
  LoneSession t;
  REQUIRE(t.log.frames.size() == 1);
  const auto& c = t.OurConnect();
  CHECK(c.peer_id == "node-a:7000");
  CHECK(c.wire_major == 1);
  CHECK(c.wire_minor == 1);
  CHECK(c.features.empty());
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

TEST_CASE("nonces are fresh per connection, from the daemon's CSPRNG source", "[session]") {
  LoneSession t;
  t.node.config.random_token = CsprngToken;
  t.Make("node-b:7000");
  const std::string first = t.OurConnect().nonce;
  t.Make("node-b:7000");
  const std::string second = t.OurConnect().nonce;
  CHECK(first.size() == 32);
  CHECK(first != second);
  CHECK(first.find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("a session without a token source is refused", "[session]") {
  LoneSession t;
  t.node.config.random_token = nullptr;
  CHECK_THROWS_AS(t.Make("node-b:7000"), std::logic_error);
}

TEST_CASE("a failing token source closes the session before any connect, never a fixed nonce", "[session]") {
  LoneSession t;
  t.node.config.random_token = [] { return std::optional<std::string>(); };
  t.Make("node-b:7000");
  CHECK(t.log.frames.empty());
  CHECK(t.session->state() == State::kClosed);
  CHECK(t.session->close_reason() == "no random nonce: the token source failed");
  CHECK(t.session->close_cause() == CloseCause::kNoRandomToken);
}

TEST_CASE("a failing token source closes a ready session instead of pinging with a fixed nonce", "[session]") {
  LoneSession t;
  auto fail = std::make_shared<bool>(false);
  auto tokens = TokenSource(500);
  t.node.config.random_token = [fail, tokens]() -> std::optional<std::string> {
    if (*fail) return std::nullopt;
    return tokens();
  };
  t.Make("node-b:7000");
  t.MakeReady();
  *fail = true;
  t.clock.Advance(2s);
  t.session->OnTick();
  CHECK_FALSE(std::holds_alternative<protocol::Ping>(t.Last()));
  CHECK(t.LastDisconnectReason() == "no random nonce: the token source failed");
  CHECK(t.session->state() == State::kClosed);
  CHECK(t.session->close_reason() == "no random nonce: the token source failed");
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
    CHECK(t.LastDisconnectReason() == "connect_ack.peer_id \"node-c:1\" differs from connect.peer_id \"node-b:7000\"");
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
  SECTION("a second connect_ack is a violation, even an identical one (1.1 section 4 step 5)") {
    t.MakeReady();
    CHECK(t.session->OnMessage(t.PeerAck()).code() == Status::Code::kViolation);
    CHECK(t.LastDisconnectReason() == "second connect_ack");
  }
  CHECK((t.session->ready() || t.session->state() == State::kClosed));
}

TEST_CASE("features: the negotiated set is the intersection, unknown names ignored", "[session][features]") {
  LoneSession t;
  t.node.config.features = {"xxh3", "zstd"};
  t.Make("node-b:7000");
  CHECK(t.OurConnect().features == std::vector<std::string>{"xxh3", "zstd"});
  protocol::Connect c = t.PeerConnect();
  c.features = {"from-2030", "zstd"};
  REQUIRE(t.session->OnMessage(c).ok());
  CHECK_FALSE(t.session->FeatureOn("zstd"));  // nothing is on before ready
  REQUIRE(t.session->OnMessage(t.PeerAck()).ok());
  CHECK(t.session->FeatureOn("zstd"));
  CHECK_FALSE(t.session->FeatureOn("xxh3"));
  CHECK_FALSE(t.session->FeatureOn("from-2030"));
  CHECK(t.session->features_on() == std::vector<std::string>{"zstd"});
}

TEST_CASE("features: our node offers none by default", "[session][features]") {
  SessionPair p;
  p.ConnectAndPump();
  CHECK(std::get<protocol::Connect>(p.pipe.Delivered(SessionPipe::kB)[0]).features.empty());
  CHECK(p.a.session->features_on().empty());
  CHECK_FALSE(p.b.session->FeatureOn("xxh3"));
}

TEST_CASE("inbound limits: 64 KiB and no payload before ready, the maxima after", "[session][limits]") {
  LoneSession t;
  CHECK(t.session->MaxInboundHeaderLen() == 65536);
  CHECK(t.session->MaxInboundPayloadLen() == 0);
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  CHECK(t.session->MaxInboundHeaderLen() == 65536);  // the peer is not proven yet
  REQUIRE(t.session->OnMessage(t.PeerAck()).ok());
  CHECK(t.session->MaxInboundHeaderLen() == protocol::kMaxHeaderLen);
  CHECK(t.session->MaxInboundPayloadLen() == protocol::kMaxPayloadLen);
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

}  // namespace
}  // namespace kvpeer::session::testing
