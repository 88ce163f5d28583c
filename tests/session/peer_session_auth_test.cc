// PeerSession: authentication, the PSK proofs of the ordered handshake and
// the transport identity that must vouch for the claimed peer_id.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>

#include "session/peer_session.h"
#include "session/psk_proof.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using protocol::Message;
using State = PeerSession::State;

const std::string kPsk(40, 's');

std::string DialerProof(const std::string& psk, const std::string& acceptor_nonce, const std::string& dialer_nonce,
                        const std::string& dialer_id, const std::string& acceptor_id) {
  return PskProof(psk, {ProofRole::kDialer, acceptor_nonce, dialer_nonce, dialer_id, acceptor_id});
}

std::string AcceptorProof(const std::string& psk, const std::string& dialer_nonce, const std::string& acceptor_nonce,
                          const std::string& acceptor_id, const std::string& dialer_id) {
  return PskProof(psk, {ProofRole::kAcceptor, dialer_nonce, acceptor_nonce, acceptor_id, dialer_id});
}

// Restarts `t`'s session with the PSK configured (the session's send
// callback points into `t`, so `t` itself is never copied or moved).
void UsePsk(LoneSession& t, const std::string& expected_peer) {
  t.node.config.psk = kPsk;
  t.Make(expected_peer);
}

TEST_CASE("PSK proofs match an independent HMAC-SHA256 computation", "[session][psk]") {
  // Computed with Python's hmac module over "kvpeer-v1.1" 0 role 0 nonce 0 nonce 0 id 0 id.
  const std::string n1 = std::string(16, '0') + std::string(16, '1');
  const std::string n2(32, 'a');
  CHECK(DialerProof(std::string(32, 'k'), n1, n2, "node-a:7000", "node-b:7000") ==
        "960e8862468f380ee23b6c70cd5b40988b479c74a624efa3a60f4eb8ddce3e3a");
  CHECK(AcceptorProof(std::string(32, 'k'), n2, n1, "node-b:7000", "node-a:7000") ==
        "24d56074f5e9bfea621790dc7b52326981d1c4aaadd60559615f92b414e4a837");
  // Each input matters, the role included.
  const std::string base = DialerProof(kPsk, n1, n2, "a:1", "b:1");
  CHECK(base != AcceptorProof(kPsk, n1, n2, "a:1", "b:1"));
  CHECK(base != DialerProof(kPsk, n2, n1, "a:1", "b:1"));
  CHECK(base != DialerProof(kPsk, n1, n2, "b:1", "a:1"));
  CHECK(base != DialerProof(std::string(40, 't'), n1, n2, "a:1", "b:1"));
  CHECK(ProofsEqual("ab", "ab"));
  CHECK_FALSE(ProofsEqual("ab", "ac"));
  CHECK_FALSE(ProofsEqual("ab", "abc"));
  CHECK_FALSE(ProofsEqual("", ""));
}

TEST_CASE("PSK: the ordered handshake completes, dialer first, and each proof is the spec's", "[session][psk]") {
  SessionPair p;
  p.a.config.psk = kPsk;  // a dials b
  p.b.config.psk = kPsk;
  p.ConnectAndPump();
  REQUIRE(p.a.session->ready());
  REQUIRE(p.b.session->ready());
  const auto& to_b = p.pipe.Delivered(SessionPipe::kB);
  const auto& to_a = p.pipe.Delivered(SessionPipe::kA);
  REQUIRE(to_b.size() == 2);
  REQUIRE(to_a.size() == 2);
  const protocol::Connect a_connect = std::get<protocol::Connect>(to_b[0]);
  const protocol::Connect b_connect = std::get<protocol::Connect>(to_a[0]);
  const auto& dialer_ack = std::get<protocol::ConnectAck>(to_b[1]);
  const auto& acceptor_ack = std::get<protocol::ConnectAck>(to_a[1]);
  CHECK(dialer_ack.proof == DialerProof(kPsk, b_connect.nonce, a_connect.nonce, p.a.id, p.b.id));
  CHECK(acceptor_ack.proof == AcceptorProof(kPsk, a_connect.nonce, b_connect.nonce, p.b.id, p.a.id));
}

TEST_CASE("PSK: the acceptor sends no ack and no proof before it has verified the dialer's", "[session][psk]") {
  LoneSession t("");
  UsePsk(t, "");  // we accept; the test is the dialer node-b
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  CHECK(t.log.frames.size() == 1);  // only our connect
  CHECK(t.log.Count<protocol::ConnectAck>() == 0);
  CHECK_FALSE(t.session->ready());
  // Pings are still answered (liveness), but carry nothing of the key.
  REQUIRE(t.session->OnMessage(protocol::Ping{Token(3)}).ok());
  CHECK(t.log.Count<protocol::ConnectAck>() == 0);

  protocol::ConnectAck ack = t.PeerAck();
  ack.proof = DialerProof(kPsk, t.OurConnect().nonce, Token(77), "node-b:7000", "node-a:7000");
  REQUIRE(t.session->OnMessage(ack).ok());
  REQUIRE(t.session->ready());
  const auto& ours = std::get<protocol::ConnectAck>(t.Last());
  CHECK(ours.proof == AcceptorProof(kPsk, Token(77), t.OurConnect().nonce, "node-a:7000", "node-b:7000"));
}

TEST_CASE("PSK: the dialer proves at once and becomes ready only on the acceptor's valid proof", "[session][psk]") {
  LoneSession t("node-b:7000");
  UsePsk(t, "node-b:7000");
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  const auto& ours = std::get<protocol::ConnectAck>(t.Last());
  CHECK(ours.proof == DialerProof(kPsk, Token(77), t.OurConnect().nonce, "node-a:7000", "node-b:7000"));
  CHECK_FALSE(t.session->ready());
  protocol::ConnectAck ack = t.PeerAck();
  ack.proof = AcceptorProof(kPsk, t.OurConnect().nonce, Token(77), "node-b:7000", "node-a:7000");
  REQUIRE(t.session->OnMessage(ack).ok());
  CHECK(t.session->ready());
}

TEST_CASE("PSK: a wrong or missing proof fails authentication and nothing else is processed", "[session][psk]") {
  const bool we_dial = GENERATE(true, false);
  LoneSession t(we_dial ? "node-b:7000" : "");
  UsePsk(t, we_dial ? "node-b:7000" : "");
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  const std::string our_nonce = t.OurConnect().nonce;
  // The proof the test peer should send, and variations of it that must fail.
  const auto right = [&](const std::string& psk, const std::string& verifier_nonce, const std::string& prover_nonce,
                         const std::string& prover, const std::string& verifier) {
    return we_dial ? AcceptorProof(psk, verifier_nonce, prover_nonce, prover, verifier)
                   : DialerProof(psk, verifier_nonce, prover_nonce, prover, verifier);
  };
  const auto wrong_role = [&](const std::string& verifier_nonce, const std::string& prover_nonce) {
    return we_dial ? DialerProof(kPsk, verifier_nonce, prover_nonce, "node-b:7000", "node-a:7000")
                   : AcceptorProof(kPsk, verifier_nonce, prover_nonce, "node-b:7000", "node-a:7000");
  };
  protocol::ConnectAck ack = t.PeerAck();
  SECTION("missing") {}
  SECTION("empty") { ack.proof = ""; }
  SECTION("uppercase") {
    std::string upper = right(kPsk, our_nonce, Token(77), "node-b:7000", "node-a:7000");
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    ack.proof = upper;
  }
  SECTION("wrong key") { ack.proof = right(std::string(40, 'x'), our_nonce, Token(77), "node-b:7000", "node-a:7000"); }
  SECTION("another connection's nonce") { ack.proof = right(kPsk, Token(5), Token(77), "node-b:7000", "node-a:7000"); }
  SECTION("nonces swapped") { ack.proof = right(kPsk, Token(77), our_nonce, "node-b:7000", "node-a:7000"); }
  SECTION("ids swapped") { ack.proof = right(kPsk, our_nonce, Token(77), "node-a:7000", "node-b:7000"); }
  SECTION("a third node's id") { ack.proof = right(kPsk, our_nonce, Token(77), "node-b:7000", "node-m:7000"); }
  SECTION("the other role's proof") { ack.proof = wrong_role(our_nonce, Token(77)); }
  SECTION("the 1.0 proof") {
    ack.proof = PskProof(kPsk, {ProofRole::kDialer, our_nonce, t.OurConnect().epoch, "node-b:7000", ""});
  }
  if (we_dial) {
    SECTION("our own proof reflected") { ack.proof = std::get<protocol::ConnectAck>(t.Last()).proof; }
  }
  const size_t acks_before = t.log.Count<protocol::ConnectAck>();
  const Status s = t.session->OnMessage(ack);
  CHECK(s.code() == Status::Code::kViolation);
  CHECK(t.LastDisconnectReason() == "authentication failed");
  CHECK(t.session->state() == State::kClosed);
  CHECK(t.session->authentication_failed());
  CHECK_FALSE(t.session->ready());
  CHECK(t.log.Count<protocol::ConnectAck>() == acks_before);  // an acceptor never proved anything
  const size_t sent = t.log.frames.size();
  CHECK(t.session->OnMessage(protocol::Ping{Token(3)}).code() == Status::Code::kUnavailable);
  CHECK(t.session->OnMessage(protocol::Lookup{"r", {"k"}, 1}).code() == Status::Code::kUnavailable);
  CHECK(t.log.frames.size() == sent);
}

// The relay of 1.0 (docs/security.md): M, without the key, sits between
// dialer A and acceptor B, speaking to each as the other. Here M relays
// every field it can; no proof made on one connection verifies on the other.
TEST_CASE("PSK: a proof computed for one connection fails on another (no relay)", "[session][psk]") {
  // Connection 1: M dials A claiming to be B. Connection 2: M dials B claiming to be A.
  TestNode a("node-a:7000", 1);
  TestNode b("node-b:7000", 2);
  a.config.psk = kPsk;
  b.config.psk = kPsk;
  FakeClock clock;
  FrameLog to_m_from_a;
  FrameLog to_m_from_b;
  PeerSession at_a(a.config, clock.AsClock(), to_m_from_a.AsSend(), a.index);  // A accepts M
  PeerSession at_b(b.config, clock.AsClock(), to_m_from_b.AsSend(), b.index);  // B accepts M
  at_a.Start();
  at_b.Start();
  const protocol::Connect a_connect = std::get<protocol::Connect>(to_m_from_a.frames.at(0).message);
  const protocol::Connect b_connect = std::get<protocol::Connect>(to_m_from_b.frames.at(0).message);
  // M forwards B's connect to A and A's connect to B (same nonces, epochs, ids).
  protocol::Connect as_b = b_connect;
  protocol::Connect as_a = a_connect;
  as_b.nonce = Token(901);  // M's own nonces: it must send some
  as_a.nonce = Token(902);
  REQUIRE(at_a.OnMessage(as_b).ok());
  REQUIRE(at_b.OnMessage(as_a).ok());
  // Neither acceptor has said anything an attacker could forward.
  CHECK(to_m_from_a.Count<protocol::ConnectAck>() == 0);
  CHECK(to_m_from_b.Count<protocol::ConnectAck>() == 0);
  // The only proof M could ever see is one made on another connection; the
  // nearest M gets is a genuine dialer proof of B to A on a real A-B
  // connection, with that connection's nonces, which M replays here.
  const std::string genuine = DialerProof(kPsk, a_connect.nonce, Token(555), "node-b:7000", "node-a:7000");
  protocol::ConnectAck ack{"node-b:7000", 1, 1, b_connect.epoch, genuine};
  CHECK_FALSE(at_a.OnMessage(ack).ok());
  CHECK(at_a.close_reason() == "authentication failed");
  CHECK_FALSE(at_a.ready());
  CHECK(to_m_from_a.Count<protocol::ConnectAck>() == 0);
  protocol::ConnectAck ack_b{"node-a:7000", 1, 1, a_connect.epoch, std::nullopt};
  CHECK_FALSE(at_b.OnMessage(ack_b).ok());
  CHECK(at_b.close_reason() == "authentication failed");
  CHECK(to_m_from_b.Count<protocol::ConnectAck>() == 0);
}

TEST_CASE("PSK: a wire 1.0 peer is refused, naming wire_minor; without a PSK it is accepted", "[session][psk]") {
  const bool we_dial = GENERATE(true, false);
  SECTION("with a PSK") {
    LoneSession t(we_dial ? "node-b:7000" : "");
    UsePsk(t, we_dial ? "node-b:7000" : "");
    protocol::Connect c = t.PeerConnect();
    c.wire_minor = 0;
    CHECK(t.session->OnMessage(c).code() == Status::Code::kViolation);
    CHECK(t.LastDisconnectReason().rfind("wire_minor mismatch: ours 1, peer 0", 0) == 0);
    CHECK(t.log.Count<protocol::ConnectAck>() == 0);
    CHECK(t.session->state() == State::kClosed);
  }
  SECTION("without a PSK") {
    LoneSession t(we_dial ? "node-b:7000" : "");
    protocol::Connect c = t.PeerConnect();
    c.wire_minor = 0;
    c.features.clear();
    REQUIRE(t.session->OnMessage(c).ok());
    protocol::ConnectAck ack = t.PeerAck();
    ack.wire_minor = 0;
    REQUIRE(t.session->OnMessage(ack).ok());
    CHECK(t.session->ready());
    CHECK(t.session->features_on().empty());
  }
}

TEST_CASE("PSK configured on one side only: authentication fails", "[session][psk]") {
  SECTION("the dialer has the key") {
    SessionPair p;
    p.a.config.psk = kPsk;
    p.ConnectAndPump();
    CHECK(p.a.session->close_reason() == "authentication failed");
    CHECK(p.b.session->close_reason() == "peer disconnected: authentication failed");
    // What the daemon counts (auth_failures, auth_rejected_by_peer), as values.
    CHECK(p.a.session->authentication_failed());
    CHECK_FALSE(p.a.session->peer_refused_authentication());
    CHECK(p.b.session->peer_refused_authentication());  // b, keyless, was ready already
    CHECK_FALSE(p.b.session->authentication_failed());
  }
  SECTION("the acceptor has the key") {
    SessionPair p;
    p.b.config.psk = kPsk;
    p.ConnectAndPump();
    CHECK(p.b.session->close_reason() == "authentication failed");
    CHECK(p.a.session->close_reason() == "peer disconnected: authentication failed");
    CHECK(p.b.session->authentication_failed());
    CHECK(p.a.session->peer_refused_authentication());
  }
}

TEST_CASE("a transport identity that does not vouch for the claimed peer_id fails authentication", "[session][tls]") {
  // Wire spec section 5, "With TLS": both ends check, before anything else
  // of the connect counts; the peer hears only "authentication failed".
  const bool we_dial = GENERATE(true, false);
  const bool with_psk = GENERATE(false, true);
  LoneSession t(we_dial ? "node-b:7000" : "");
  std::vector<std::string> asked;
  t.node.config.identity_check = [&](const std::string& peer_id) -> Status {
    asked.push_back(peer_id);
    if (peer_id == "node-b:7000") return Status::Ok();
    return Status::Violation("the peer's certificate does not name host " + peer_id.substr(0, peer_id.find(':')));
  };
  if (with_psk) t.node.config.psk = kPsk;
  t.Make(we_dial ? "node-b:7000" : "");
  SECTION("a claimed id the certificate names is accepted") {
    REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
    CHECK(asked == std::vector<std::string>{"node-b:7000"});
    CHECK_FALSE(t.session->authentication_failed());
  }
  SECTION("another node's id is refused before its settings are judged") {
    protocol::Connect c = t.PeerConnect();
    c.peer_id = "node-c:7000";
    c.block_len = kBlockLen + 1;  // would be a settings mismatch: not looked at
    const size_t acks_before = t.log.Count<protocol::ConnectAck>();
    CHECK(t.session->OnMessage(c).code() == Status::Code::kViolation);
    CHECK(t.LastDisconnectReason() == "authentication failed");
    CHECK(t.session->state() == State::kClosed);
    CHECK(t.session->authentication_failed());
    CHECK(t.session->authentication_detail() == "the peer's certificate does not name host node-c");
    CHECK(t.log.Count<protocol::ConnectAck>() == acks_before);
    CHECK_FALSE(t.session->peer_connect().has_value());
  }
}

TEST_CASE("without a transport identity nothing is checked", "[session][tls]") {
  LoneSession t("");
  t.MakeReady();
  CHECK(t.session->authentication_detail().empty());
}

TEST_CASE("a disconnect for another reason is not an authentication refusal", "[session][psk]") {
  LoneSession t;
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  REQUIRE(t.session->OnMessage(t.PeerAck()).ok());
  CHECK(t.session->OnMessage(protocol::Disconnect{"authentication failed, said nobody"}).code() ==
        Status::Code::kUnavailable);
  CHECK_FALSE(t.session->peer_refused_authentication());
  CHECK_FALSE(t.session->authentication_failed());
}

TEST_CASE("without a PSK a proof we did not ask for is ignored", "[session][psk]") {
  LoneSession t;
  REQUIRE(t.session->OnMessage(t.PeerConnect()).ok());
  protocol::ConnectAck ack = t.PeerAck();
  ack.proof = "anything";
  CHECK(t.session->OnMessage(ack).ok());
  CHECK(t.session->ready());
}

}  // namespace
}  // namespace kvpeer::session::testing
