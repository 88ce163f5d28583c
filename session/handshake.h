// Handshake: the connect / connect_ack exchange of wire-protocol.md
// sections 4 and 5 for one connection, as a small state machine that builds
// our frames and judges the peer's. PeerSession sends what it returns and
// closes the connection on any non-ok Status (whose message becomes the
// disconnect reason).
//
// Thread-safety: none; owned by one PeerSession.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "protocol/messages.h"
#include "protocol/status.h"

namespace kvpeer::session {

struct HandshakeSettings {
  std::string local_id;
  uint64_t block_len = 0;
  std::string config_fingerprint;
  std::string hash_seed;
  std::string epoch;
  std::optional<std::string> psk;
  std::string expected_peer_id;  // the node we dialled; empty when we accepted
};

class Handshake {
 public:
  explicit Handshake(HandshakeSettings settings);

  // Our connect, carrying a fresh `nonce`. Call once.
  protocol::Connect MakeConnect(std::string nonce);

  // Judges the peer's connect. On success *reply is the connect_ack to send
  // at once. Errors are kViolation; a settings mismatch names the field and
  // both values (only the field for hash_seed).
  Status OnConnect(const protocol::Connect& peer, protocol::ConnectAck* reply);

  // Judges the peer's connect_ack: it must follow the peer's connect, carry
  // the proof when a PSK is configured ("authentication failed" otherwise)
  // and repeat the connect's peer_id and epoch. An identical repeat is
  // harmless; a different one is a violation.
  Status OnConnectAck(const protocol::ConnectAck& ack);

  // Both acks exchanged: we acked the peer's connect (OnConnect succeeded and
  // the caller sent the reply at once) and accepted the peer's ack.
  bool complete() const { return peer_connect_.has_value() && peer_ack_.has_value(); }
  const std::optional<protocol::Connect>& peer_connect() const { return peer_connect_; }

 private:
  Status CheckSettings(const protocol::Connect& peer) const;
  Status CheckIdentity(const protocol::Connect& peer) const;
  Status CheckProof(const protocol::ConnectAck& ack) const;
  Status CheckAckMatchesConnect(const protocol::ConnectAck& ack) const;

  HandshakeSettings settings_;
  std::optional<protocol::Connect> own_connect_;
  std::optional<protocol::Connect> peer_connect_;
  std::optional<protocol::ConnectAck> peer_ack_;
};

}  // namespace kvpeer::session
