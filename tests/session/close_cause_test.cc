// PeerSession::close_cause() and peer_disconnect_reason(): every way a
// session ends leaves a cause value, and a peer's disconnect reason counts
// only when it is exactly a fixed reason (session/peer_disconnect_reason.h).
#include <catch2/catch.hpp>

#include "session/close_cause.h"
#include "session/peer_disconnect_reason.h"
#include "protocol/limits.h"
#include "session/peer_session.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;

TEST_CASE("an open session has no close cause", "[session][cause]") {
  LoneSession t;
  CHECK(t.session->close_cause() == CloseCause::kOpen);
  t.MakeReady();
  CHECK(t.session->close_cause() == CloseCause::kOpen);
  CHECK(t.session->peer_disconnect_reason() == PeerDisconnectReason::kUnspecified);
}

TEST_CASE("a refused connect closes with the cause of the refusal", "[session][cause]") {
  LoneSession t;
  protocol::Connect c = t.PeerConnect();
  CloseCause expected = CloseCause::kOpen;
  SECTION("config_fingerprint") {
    c.config_fingerprint = "fp-2";
    expected = CloseCause::kConfigFingerprint;
  }
  SECTION("hash_seed") {
    c.hash_seed = "seed-1";
    expected = CloseCause::kHashSeed;
  }
  SECTION("block_len") {
    c.block_len = kBlockLen * 2;
    expected = CloseCause::kBlockLen;
  }
  SECTION("wire_major") {
    c.wire_major = protocol::kWireMajor + 1;
    expected = CloseCause::kWireVersion;
  }
  SECTION("not the node we dialled") {
    c.peer_id = "node-m:7000";
    expected = CloseCause::kPeerId;
  }
  SECTION("our own epoch") {
    c.epoch = t.OurConnect().epoch;
    expected = CloseCause::kSelfConnection;
  }
  CHECK(t.session->OnMessage(c).code() == Status::Code::kViolation);
  CHECK(t.session->close_cause() == expected);
  CHECK_FALSE(t.session->authentication_failed());
}

TEST_CASE("a bad connect_ack closes with its cause", "[session][cause]") {
  LoneSession t;
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  protocol::ConnectAck ack = t.PeerAck();
  CloseCause expected = CloseCause::kOpen;
  SECTION("another peer_id") {
    ack.peer_id = "node-m:7000";
    expected = CloseCause::kPeerId;
  }
  SECTION("another wire_major") {
    ack.wire_major = protocol::kWireMajor + 1;
    expected = CloseCause::kWireVersion;
  }
  SECTION("another epoch") {
    ack.epoch = Token(3);
    expected = CloseCause::kBadMessage;
  }
  CHECK(t.session->OnMessage(ack).code() == Status::Code::kViolation);
  CHECK(t.session->close_cause() == expected);
}

TEST_CASE("protocol violations close with their kind", "[session][cause]") {
  LoneSession t;
  SECTION("a role's message before the handshake") {
    CHECK(t.session->OnMessage(protocol::Lookup{"r", {"k"}, 1}).code() == Status::Code::kViolation);
    CHECK(t.session->close_reason() == "lookup before handshake");
    CHECK(t.session->close_cause() == CloseCause::kMessageBeforeHandshake);
  }
  SECTION("block_data before the handshake") {
    BlockDataPlan plan;
    CHECK(t.session->OnBlockDataHeader(protocol::BlockData{"r", 1, {0}}, &plan).code() == Status::Code::kViolation);
    CHECK(t.session->close_cause() == CloseCause::kMessageBeforeHandshake);
  }
  SECTION("a connect after ready") {
    t.MakeReady();
    CHECK(t.session->OnMessage(t.PeerConnect()).code() == Status::Code::kViolation);
    CHECK(t.session->close_cause() == CloseCause::kBadMessage);
  }
  SECTION("a second connect_ack") {
    t.MakeReady();
    CHECK(t.session->OnMessage(t.PeerAck()).code() == Status::Code::kViolation);
    CHECK(t.session->close_cause() == CloseCause::kBadMessage);
  }
  SECTION("block_data for no load (a role's violation)") {
    t.MakeReady();
    BlockDataPlan plan;
    CHECK(t.session->OnBlockDataHeader(protocol::BlockData{"r", 1, {0}}, &plan).code() == Status::Code::kViolation);
    CHECK(t.session->close_cause() == CloseCause::kBadMessage);
  }
  SECTION("block_data handed to OnMessage (our error, not the peer's)") {
    t.MakeReady();
    CHECK(t.session->OnMessage(protocol::BlockData{"r", 1, {0}}).code() == Status::Code::kInternal);
    CHECK(t.session->close_cause() == CloseCause::kLocalError);
  }
}

TEST_CASE("the session's timers close with their cause", "[session][cause]") {
  LoneSession t;
  SECTION("the handshake deadline") {
    t.clock.Advance(t.node.config.handshake_timeout);
    t.session->OnTick();
    CHECK(t.session->close_reason() == "handshake timed out");
    CHECK(t.session->close_cause() == CloseCause::kHandshakeTimeout);
  }
  SECTION("liveness") {
    t.MakeReady();
    t.clock.Advance(t.node.config.liveness_timeout);
    t.session->OnTick();
    CHECK(t.session->close_cause() == CloseCause::kPeerSilent);
  }
}

TEST_CASE("a peer's disconnect is mapped once, by its exact fixed reason", "[session][cause]") {
  LoneSession t;
  std::optional<std::string> said;
  PeerDisconnectReason expected = PeerDisconnectReason::kUnspecified;
  SECTION("authentication failed") {
    said = "authentication failed";
    expected = PeerDisconnectReason::kAuthenticationFailed;
  }
  SECTION("node not configured") {
    said = "node not configured";
    expected = PeerDisconnectReason::kNodeNotConfigured;
  }
  SECTION("duplicate") {
    said = "duplicate";
    expected = PeerDisconnectReason::kDuplicate;
  }
  SECTION("no reason") {}
  CHECK(t.session->OnMessage(protocol::Disconnect{said}).code() == Status::Code::kUnavailable);
  CHECK(t.session->close_cause() == CloseCause::kPeerDisconnected);
  CHECK(t.session->peer_disconnect_reason() == expected);
  CHECK(t.session->peer_refused_authentication() == (expected == PeerDisconnectReason::kAuthenticationFailed));
}

TEST_CASE("a peer's disconnect text that embeds a fixed reason is unspecified", "[session][cause][attack]") {
  // During the handshake: the peer may say anything; none of it may make
  // this node count an authentication failure or a settings mismatch.
  const std::string said = GENERATE(std::string("x authentication failed y"), std::string("authentication failed\n"),
                                    std::string("peer silent config_fingerprint mismatch"),
                                    std::string("config_fingerprint mismatch: ours \"a\", peer \"b\""),
                                    std::string(" duplicate"), std::string("node not configured."));
  LoneSession t;
  (void)t.session->OnMessage(protocol::Disconnect{said});
  CHECK(t.session->close_cause() == CloseCause::kPeerDisconnected);
  CHECK(t.session->peer_disconnect_reason() == PeerDisconnectReason::kUnspecified);
  CHECK_FALSE(t.session->peer_refused_authentication());
  CHECK_FALSE(t.session->authentication_failed());
  CHECK(t.session->close_reason() == "peer disconnected: " + said);  // still shown, for people
}

TEST_CASE("both ends of a refused proof know it as values", "[session][cause][psk]") {
  SessionPair p;
  p.a.config.psk = std::string(40, 'k');
  p.ConnectAndPump();
  CHECK(p.a.session->close_cause() == CloseCause::kAuthentication);
  CHECK(p.b.session->close_cause() == CloseCause::kPeerDisconnected);
  CHECK(p.b.session->peer_disconnect_reason() == PeerDisconnectReason::kAuthenticationFailed);
}

TEST_CASE("the first close's cause stays", "[session][cause]") {
  LoneSession t;
  t.MakeReady();
  t.session->Close(CloseCause::kOperator, "disconnected by operator");
  (void)t.session->OnMessage(protocol::Disconnect{std::string("authentication failed")});
  t.session->Close(CloseCause::kShutdown, "kvpeerd is shutting down");
  CHECK(t.session->close_cause() == CloseCause::kOperator);
  CHECK(t.session->peer_disconnect_reason() == PeerDisconnectReason::kUnspecified);
}

}  // namespace
}  // namespace kvpeer::session::testing
