// Handshake: the connect / connect_ack exchange of wire-protocol.md 1.1
// sections 4 and 5 for one connection, as a small state machine that builds
// our frames and judges the peer's. PeerSession sends what it returns and
// closes the connection on any non-ok Status (whose message becomes the
// disconnect reason).
//
// Order of the acks (section 4, steps 3 and 4):
//   without a PSK  each end acks the peer's valid connect at once;
//   with a PSK     the dialer acks the acceptor's valid connect at once,
//                  with its proof; the acceptor acks only after it has
//                  verified that proof, and the dialer then verifies the
//                  acceptor's. So an acceptor never proves anything to a
//                  peer that has not proven itself first.
// The handshake is complete once we have sent our ack and accepted the
// peer's valid ack: with a PSK that means the peer is authenticated.
//
// Thread-safety: none; owned by one PeerSession.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.h"
#include "base/status.h"
#include "session/close_cause.h"

namespace kvpeer::session {

// Checks the transport's proof of identity (a TLS certificate) against the
// peer_id a peer's connect claims: ok when it matches, else a kViolation
// saying what did not match, for the log (wire-protocol.md section 5,
// "With TLS").
using IdentityCheck = std::function<Status(const std::string& peer_id)>;

struct HandshakeSettings {
  std::string local_id;
  uint64_t block_len = 0;
  std::string config_fingerprint;
  std::string hash_seed;
  std::string epoch;
  std::optional<std::string> psk;
  std::string expected_peer_id;  // the node we dialled; empty when we accepted
  // The features we offer in our connect (section 7); a feature is on when
  // the peer's connect lists it too.
  std::vector<std::string> features;
  // Empty when the transport proves nothing (plain TCP).
  IdentityCheck identity_check;
};

class Handshake {
 public:
  explicit Handshake(HandshakeSettings settings);

  bool dialer() const { return !settings_.expected_peer_id.empty(); }

  // Our connect, carrying a fresh `nonce`. Call once.
  protocol::Connect MakeConnect(std::string nonce);

  // Judges the peer's connect. On success *reply holds the connect_ack to
  // send now, or stays empty when our ack must wait (a PSK acceptor waits
  // for the dialer's proof). A peer_id the transport's identity does not
  // vouch for is kAuthentication ("authentication failed", before anything
  // else of the connect is looked at); a settings or identity mismatch is
  // the cause naming its field (its reason names the field and both values,
  // only the field for hash_seed); other errors are kBadMessage.
  Status OnConnect(const protocol::Connect& peer, std::optional<protocol::ConnectAck>* reply);

  // Judges the peer's connect_ack: it must follow the peer's connect, carry
  // a valid proof when a PSK is configured ("authentication failed"
  // otherwise) and repeat the connect's peer_id and epoch. On success
  // *reply holds our connect_ack when it was waiting for this one. A
  // second connect_ack is a violation (section 4, step 5).
  Status OnConnectAck(const protocol::ConnectAck& ack, std::optional<protocol::ConnectAck>* reply);

  // We sent our ack and accepted the peer's (authenticated, with a PSK).
  bool complete() const { return own_ack_sent_ && peer_ack_.has_value(); }
  // Why the last step failed (kOpen while none did): a refusal cause
  // (kAuthentication .. kSelfConnection), kBadMessage, or kLocalError.
  CloseCause failure() const { return failure_; }
  // For the log, after an identity mismatch: what did not match. The peer
  // is told only "authentication failed".
  const std::string& failure_detail() const { return failure_detail_; }
  const std::optional<protocol::Connect>& peer_connect() const { return peer_connect_; }

  // The negotiated features: those both connects list, in our order.
  const std::vector<std::string>& features_on() const { return features_on_; }
  bool FeatureOn(std::string_view name) const;

 private:
  Status CheckSettings(const protocol::Connect& peer);
  Status CheckIdentity(const protocol::Connect& peer);
  Status CheckProof(const protocol::ConnectAck& ack) const;
  Status CheckAckMatchesConnect(const protocol::ConnectAck& ack);
  // Our connect_ack, with our proof when a PSK is configured.
  protocol::ConnectAck MakeAck() const;
  std::string ProofBy(bool dialer_proves) const;
  Status Failed(CloseCause cause, Status status);

  HandshakeSettings settings_;
  std::optional<protocol::Connect> own_connect_;
  std::optional<protocol::Connect> peer_connect_;
  std::optional<protocol::ConnectAck> peer_ack_;
  bool own_ack_sent_ = false;
  CloseCause failure_ = CloseCause::kOpen;
  std::string failure_detail_;
  std::vector<std::string> features_on_;
};

}  // namespace kvpeer::session
