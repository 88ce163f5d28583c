#include "session/handshake.h"

#include <utility>

#include "protocol/limits.h"
#include "session/psk_proof.h"

namespace kvpeer::session {

namespace {

// Values quoted in a reason are cut short: the whole reason must fit the
// wire's 4096-character limit even when both values are 4096 long.
constexpr size_t kMaxQuotedBytes = 256;

std::string Quote(const std::string& value) {
  std::string shown = value;
  if (shown.size() > kMaxQuotedBytes) {
    size_t cut = kMaxQuotedBytes;
    // Never split a UTF-8 sequence: back up over continuation bytes.
    while (cut > 0 && (static_cast<unsigned char>(shown[cut]) & 0xC0) == 0x80) --cut;
    shown = shown.substr(0, cut) + "...";
  }
  return "\"" + shown + "\"";
}

Status Mismatch(const std::string& field, const std::string& ours, const std::string& peer) {
  return Status::Violation(field + " mismatch: ours " + ours + ", peer " + peer);
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
  own_connect_ = connect;
  return connect;
}

Status Handshake::OnConnect(const protocol::Connect& peer, protocol::ConnectAck* reply) {
  // A second connect (before or after ready) would restart a handshake the
  // peer already completed or is completing: only a confused or hostile
  // peer sends one.
  if (peer_connect_) return Status::Violation("connect after handshake");
  if (Status s = CheckSettings(peer); !s.ok()) return s;
  if (Status s = CheckIdentity(peer); !s.ok()) return s;
  peer_connect_ = peer;
  reply->peer_id = settings_.local_id;
  reply->wire_major = protocol::kWireMajor;
  reply->wire_minor = protocol::kWireMinor;
  reply->epoch = settings_.epoch;
  reply->proof.reset();
  if (settings_.psk) reply->proof = PskProof(*settings_.psk, peer.nonce, peer.epoch, settings_.local_id);
  return Status::Ok();
}

// The settings two nodes must share for blocks to mean the same thing.
// wire_minor may differ: minor versions are compatible by definition.
Status Handshake::CheckSettings(const protocol::Connect& peer) const {
  if (peer.wire_major != protocol::kWireMajor)
    return Mismatch("wire_major", std::to_string(protocol::kWireMajor), std::to_string(peer.wire_major));
  if (peer.block_len != settings_.block_len)
    return Mismatch("block_len", std::to_string(settings_.block_len), std::to_string(peer.block_len));
  if (peer.config_fingerprint != settings_.config_fingerprint)
    return Mismatch("config_fingerprint", Quote(settings_.config_fingerprint), Quote(peer.config_fingerprint));
  // The hash seed keys the block hashes; it is not printed (spec section 4).
  if (peer.hash_seed != settings_.hash_seed) return Status::Violation("hash_seed mismatch");
  return Status::Ok();
}

Status Handshake::CheckIdentity(const protocol::Connect& peer) const {
  if (!settings_.expected_peer_id.empty() && peer.peer_id != settings_.expected_peer_id)
    return Status::Violation("peer_id mismatch: dialled " + Quote(settings_.expected_peer_id) + ", peer says " +
                             Quote(peer.peer_id));
  // Our own epoch coming back is a connection to ourselves or a reflected
  // connect. Refusing it also closes a PSK reflection attack: the only
  // proof we ever compute that would pass our own check is one over our
  // own nonce and epoch, which a reflector would need us to answer.
  if (peer.epoch == settings_.epoch)
    return Status::Violation("connect.epoch equals ours (a connection to ourselves, or a reflected connect)");
  return Status::Ok();
}

Status Handshake::OnConnectAck(const protocol::ConnectAck& ack) {
  if (peer_ack_) {
    if (ack == *peer_ack_) return Status::Ok();
    return Status::Violation("connect_ack repeated with different content");
  }
  // A peer acks only after it received our connect, and it sends its own
  // connect first, so on an ordered stream its connect always precedes its ack.
  if (!peer_connect_) return Status::Violation("connect_ack before connect");
  if (!own_connect_) return Status::Internal("connect_ack before our connect was sent");
  // Authentication comes first: nothing else of an unauthenticated peer is
  // looked at (spec section 5).
  if (Status s = CheckProof(ack); !s.ok()) return s;
  if (Status s = CheckAckMatchesConnect(ack); !s.ok()) return s;
  peer_ack_ = ack;
  return Status::Ok();
}

Status Handshake::CheckProof(const protocol::ConnectAck& ack) const {
  if (!settings_.psk) return Status::Ok();  // a proof we did not ask for is ignored
  const std::string expected =
      PskProof(*settings_.psk, own_connect_->nonce, own_connect_->epoch, peer_connect_->peer_id);
  if (!ack.proof || !ProofsEqual(expected, *ack.proof)) return Status::Violation("authentication failed");
  return Status::Ok();
}

Status Handshake::CheckAckMatchesConnect(const protocol::ConnectAck& ack) const {
  if (ack.wire_major != protocol::kWireMajor)
    return Mismatch("connect_ack.wire_major", std::to_string(protocol::kWireMajor), std::to_string(ack.wire_major));
  if (ack.peer_id != peer_connect_->peer_id)
    return Status::Violation("connect_ack.peer_id " + Quote(ack.peer_id) + " differs from connect.peer_id " +
                             Quote(peer_connect_->peer_id));
  if (ack.epoch != peer_connect_->epoch)
    return Status::Violation("connect_ack.epoch " + Quote(ack.epoch) + " differs from connect.epoch " +
                             Quote(peer_connect_->epoch));
  return Status::Ok();
}

}  // namespace kvpeer::session
