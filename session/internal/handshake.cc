#include "session/internal/handshake.h"

#include <algorithm>
#include <utility>

#include "base/utf8.h"
#include "protocol/limits.h"
#include "session/peer_disconnect_reason.h"
#include "session/psk_proof.h"

namespace kvpeer::session {

namespace {

// Values quoted in a reason are cut short: the whole reason must fit the
// wire's 4096-character limit even when both values are 4096 long.
constexpr size_t kMaxQuotedBytes = 256;

std::string Quote(const std::string& value) {
  const std::string shown = value.size() > kMaxQuotedBytes ? Utf8Prefix(value, kMaxQuotedBytes) + "..." : value;
  return "\"" + shown + "\"";
}

Status Mismatch(const std::string& field, const std::string& ours, const std::string& peer) {
  return Status::Violation(field + " mismatch: ours " + ours + ", peer " + peer);
}

// The one reason the peer is told for any authentication failure
// (wire spec, "Authentication and authorisation").
Status AuthenticationFailed() {
  return Status::Violation(DisconnectReasonText(PeerDisconnectReason::kAuthenticationFailed));
}

}  // namespace

Handshake::Handshake(HandshakeSettings settings) : settings_(std::move(settings)) {}

protocol::Connect Handshake::MakeConnect(std::string nonce) {
  protocol::Connect connect;
  connect.peer_id = settings_.local_id;
  connect.wire_major = protocol::kWireMajor;
  connect.wire_minor = protocol::kWireMinor;
  connect.epoch = settings_.epoch;
  connect.block_len = settings_.block_len;
  connect.config_fingerprint = settings_.config_fingerprint;
  connect.hash_seed = settings_.hash_seed;
  connect.nonce = std::move(nonce);
  connect.features = settings_.features;
  own_connect_ = connect;
  return connect;
}

Status Handshake::Failed(CloseCause cause, Status status) {
  failure_ = cause;
  return status;
}

Status Handshake::OnConnect(const protocol::Connect& peer, std::optional<protocol::ConnectAck>* reply) {
  reply->reset();
  // A second connect (before or after ready) would restart a handshake the
  // peer already completed or is completing: only a confused or hostile
  // peer sends one.
  if (peer_connect_) return Failed(CloseCause::kBadMessage, Status::Violation("connect after handshake"));
  if (!own_connect_) return Failed(CloseCause::kLocalError, Status::Internal("connect before ours was sent"));
  if (settings_.identity_check) {
    if (Status mismatch = settings_.identity_check(peer.peer_id); !mismatch.ok()) {
      failure_detail_ = mismatch.message();
      return Failed(CloseCause::kAuthentication, AuthenticationFailed());
    }
  }
  if (Status s = CheckSettings(peer); !s.ok()) return s;
  if (Status s = CheckIdentity(peer); !s.ok()) return s;
  peer_connect_ = peer;
  for (const std::string& feature : settings_.features) {
    const bool peer_has = std::find(peer.features.begin(), peer.features.end(), feature) != peer.features.end();
    const bool listed = std::find(features_on_.begin(), features_on_.end(), feature) != features_on_.end();
    if (peer_has && !listed) features_on_.push_back(feature);
  }
  // Section 4 step 4: with a PSK only the dialer proves itself first.
  if (settings_.psk && !dialer()) return Status::Ok();
  *reply = MakeAck();
  own_ack_sent_ = true;  // the caller sends it at once
  return Status::Ok();
}

// The settings two nodes must share for blocks to mean the same thing.
// wire_minor may differ (1.0 and 1.1 frames interoperate), except with a
// PSK: 1.0's proofs can be relayed, so a 1.0 peer cannot authenticate.
Status Handshake::CheckSettings(const protocol::Connect& peer) {
  if (peer.wire_major != protocol::kWireMajor)
    return Failed(CloseCause::kWireVersion,
                  Mismatch("wire_major", std::to_string(protocol::kWireMajor), std::to_string(peer.wire_major)));
  // A 1.0 peer breaks the PSK rule of wire spec "Authentication and
  // authorisation"; it was always counted as a protocol violation.
  if (settings_.psk && peer.wire_minor < protocol::kMinWireMinorWithPsk)
    return Failed(CloseCause::kBadMessage,
                  Status::Violation("wire_minor mismatch: ours " + std::to_string(protocol::kWireMinor) + ", peer " +
                                    std::to_string(peer.wire_minor) + " (with a PSK at least " +
                                    std::to_string(protocol::kMinWireMinorWithPsk) +
                                    " is required: wire 1.0's proofs can be relayed)"));
  if (peer.block_len != settings_.block_len)
    return Failed(CloseCause::kBlockLen,
                  Mismatch("block_len", std::to_string(settings_.block_len), std::to_string(peer.block_len)));
  if (peer.config_fingerprint != settings_.config_fingerprint)
    return Failed(CloseCause::kConfigFingerprint,
                  Mismatch("config_fingerprint", Quote(settings_.config_fingerprint), Quote(peer.config_fingerprint)));
  // The hash seed keys the block hashes; it is not printed (spec section 4).
  if (peer.hash_seed != settings_.hash_seed)
    return Failed(CloseCause::kHashSeed, Status::Violation("hash_seed mismatch"));
  return Status::Ok();
}

Status Handshake::CheckIdentity(const protocol::Connect& peer) {
  if (dialer() && peer.peer_id != settings_.expected_peer_id)
    return Failed(CloseCause::kPeerId,
                  Status::Violation("peer_id mismatch: dialled " + Quote(settings_.expected_peer_id) + ", peer says " +
                                    Quote(peer.peer_id)));
  // Our own epoch coming back is a connection to ourselves or a reflected
  // connect.
  if (peer.epoch == settings_.epoch)
    return Failed(CloseCause::kSelfConnection,
                  Status::Violation("connect.epoch equals ours (a connection to ourselves, or a reflected connect)"));
  return Status::Ok();
}

Status Handshake::OnConnectAck(const protocol::ConnectAck& ack, std::optional<protocol::ConnectAck>* reply) {
  reply->reset();
  if (peer_ack_) return Failed(CloseCause::kBadMessage, Status::Violation("second connect_ack"));
  // A peer acks only after it received our connect, and it sends its own
  // connect first, so on an ordered stream its connect always precedes its ack.
  if (!peer_connect_) return Failed(CloseCause::kBadMessage, Status::Violation("connect_ack before connect"));
  // Authentication comes first: nothing else of an unauthenticated peer is
  // looked at (spec section 5).
  if (Status s = CheckProof(ack); !s.ok()) return Failed(CloseCause::kAuthentication, s);
  if (Status s = CheckAckMatchesConnect(ack); !s.ok()) return s;
  peer_ack_ = ack;
  if (!own_ack_sent_) {  // a PSK acceptor, now that the dialer is proven
    *reply = MakeAck();
    own_ack_sent_ = true;
  }
  return Status::Ok();
}

protocol::ConnectAck Handshake::MakeAck() const {
  protocol::ConnectAck ack;
  ack.peer_id = settings_.local_id;
  ack.wire_major = protocol::kWireMajor;
  ack.wire_minor = protocol::kWireMinor;
  ack.epoch = settings_.epoch;
  if (settings_.psk) ack.proof = ProofBy(/*dialer_proves=*/dialer());
  return ack;
}

// The proof that the dialer (or the acceptor) of this connection must send,
// from the nonces and peer ids as they stand in the two connects.
std::string Handshake::ProofBy(bool dialer_proves) const {
  const protocol::Connect& ours = *own_connect_;
  const protocol::Connect& theirs = *peer_connect_;
  const bool we_prove = dialer_proves == dialer();
  const protocol::Connect& prover = we_prove ? ours : theirs;
  const protocol::Connect& verifier = we_prove ? theirs : ours;
  return PskProof(*settings_.psk, {dialer_proves ? ProofRole::kDialer : ProofRole::kAcceptor, verifier.nonce,
                                   prover.nonce, prover.peer_id, verifier.peer_id});
}

Status Handshake::CheckProof(const protocol::ConnectAck& ack) const {
  if (!settings_.psk) return Status::Ok();  // a proof we did not ask for is ignored
  const std::string expected = ProofBy(/*dialer_proves=*/!dialer());
  if (!ack.proof || !ProofsEqual(expected, *ack.proof)) return AuthenticationFailed();
  return Status::Ok();
}

Status Handshake::CheckAckMatchesConnect(const protocol::ConnectAck& ack) {
  if (ack.wire_major != protocol::kWireMajor)
    return Failed(CloseCause::kWireVersion, Mismatch("connect_ack.wire_major", std::to_string(protocol::kWireMajor),
                                                     std::to_string(ack.wire_major)));
  if (ack.peer_id != peer_connect_->peer_id)
    return Failed(CloseCause::kPeerId,
                  Status::Violation("connect_ack.peer_id " + Quote(ack.peer_id) + " differs from connect.peer_id " +
                                    Quote(peer_connect_->peer_id)));
  if (ack.epoch != peer_connect_->epoch)
    return Failed(CloseCause::kBadMessage,
                  Status::Violation("connect_ack.epoch " + Quote(ack.epoch) + " differs from connect.epoch " +
                                    Quote(peer_connect_->epoch)));
  return Status::Ok();
}

bool Handshake::FeatureOn(std::string_view name) const {
  return std::find(features_on_.begin(), features_on_.end(), name) != features_on_.end();
}

}  // namespace kvpeer::session
