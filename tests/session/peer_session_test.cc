// PeerSession: handshake, authentication, send gating, dispatch, liveness
// and close, through the real ClientRole and ServerRole.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <stdexcept>

#include "base/random_token.h"

#include "session/peer_session.h"
#include "session/psk_proof.h"
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

// ---------------------------------------------------------------- PSK (wire spec 1.1 sections 4, 5)

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
