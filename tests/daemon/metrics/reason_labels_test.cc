// Reason labels (daemon/metrics/reason_labels.h): every label comes from a cause
// value; a peer's disconnect text picks a label only when it is exactly a
// fixed reason.
#include "daemon/metrics/reason_labels.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "session/peer_disconnect_reason.h"

namespace kvpeer::daemon {
namespace {

using session::CloseCause;
using session::PeerDisconnectReason;

std::string Handshake(CloseCause cause, PeerDisconnectReason reason = PeerDisconnectReason::kUnspecified) {
  return std::string(kHandshakeFailureLabels[HandshakeFailureLabel(cause, reason)]);
}

// What a peer's disconnect{reason} counts as before the handshake completed.
std::string PeerSaid(const std::string& reason) {
  return Handshake(CloseCause::kPeerDisconnected, session::ParseDisconnectReason(reason));
}

std::string Close(CloseCause cause) { return std::string(kSessionCloseLabels[SessionCloseLabel(cause)]); }

TEST_CASE("handshake failures are labelled from their close cause") {
  CHECK(Handshake(CloseCause::kAuthentication) == "authentication");
  CHECK(Handshake(CloseCause::kConfigFingerprint) == "config_fingerprint");
  CHECK(Handshake(CloseCause::kHashSeed) == "hash_seed");
  CHECK(Handshake(CloseCause::kBlockLen) == "block_len");
  CHECK(Handshake(CloseCause::kWireVersion) == "wire_version");
  CHECK(Handshake(CloseCause::kPeerId) == "peer_id");
  CHECK(Handshake(CloseCause::kSelfConnection) == "self_connection");
  CHECK(Handshake(CloseCause::kTls) == "tls");
  CHECK(Handshake(CloseCause::kHandshakeTimeout) == "timeout");
  CHECK(Handshake(CloseCause::kConnectFailed) == "connect_failed");
  CHECK(Handshake(CloseCause::kConnectionLost) == "connection_lost");
  CHECK(Handshake(CloseCause::kPeerSilent) == "connection_lost");
  CHECK(Handshake(CloseCause::kMalformedFrame) == "protocol_violation");
  CHECK(Handshake(CloseCause::kMessageBeforeHandshake) == "protocol_violation");
  CHECK(Handshake(CloseCause::kBadMessage) == "protocol_violation");
  CHECK(Handshake(CloseCause::kLocalError) == "other");
  CHECK(Handshake(CloseCause::kNoRandomToken) == "other");
  // The refusals, and only they, are the leading labels (IsHandshakeRefusal).
  CHECK(IsHandshakeRefusal(HandshakeFailureLabel(CloseCause::kSelfConnection, PeerDisconnectReason::kUnspecified)));
  CHECK_FALSE(IsHandshakeRefusal(HandshakeFailureLabel(CloseCause::kTls, PeerDisconnectReason::kUnspecified)));
}

TEST_CASE("a peer's disconnect during the handshake is labelled by its exact fixed reason") {
  CHECK(PeerSaid("authentication failed") == "authentication");
  CHECK(PeerSaid("node not configured") == "peer_not_configured");
  CHECK(PeerSaid("shutting down") == "peer_shutting_down");
  CHECK(PeerSaid("kvpeerd is shutting down") == "peer_shutting_down");
  CHECK(PeerSaid("handshake timed out") == "timeout");
  CHECK(PeerSaid("duplicate") == "other");
  CHECK(PeerSaid("too many peers") == "other");
  CHECK(PeerSaid("idle") == "other");                          // only a ready session closes as idle
  CHECK(Handshake(CloseCause::kPeerDisconnected) == "other");  // no reason at all
  // A refusal is a refusal on both ends only when it is the fixed reason.
  CHECK(IsHandshakeRefusal(
      HandshakeFailureLabel(CloseCause::kPeerDisconnected, PeerDisconnectReason::kAuthenticationFailed)));
}

TEST_CASE("a peer's disconnect text cannot choose a handshake failure label") {
  // Peer input that embeds, quotes or pads a reason this node would count
  // under a specific label: all of it is "other".
  CHECK(PeerSaid("x authentication failed y") == "other");
  CHECK(PeerSaid("authentication failed ") == "other");
  CHECK(PeerSaid("Authentication failed") == "other");
  CHECK(PeerSaid("peer silent config_fingerprint mismatch") == "other");
  CHECK(PeerSaid("TLS handshake failed: handshake timed out") == "other");
  CHECK(PeerSaid("cannot connect to x: node not configured") == "other");
  CHECK(PeerSaid("peer_id mismatch: dialled \"a:1\", peer says \"b:1\"") == "other");
  // A settings mismatch the peer found and worded in its reason is labelled
  // under its field on the peer's end only (the end that found it).
  CHECK(PeerSaid("config_fingerprint mismatch: ours \"b\", peer \"a\"") == "other");
  CHECK(PeerSaid("hash_seed mismatch") == "other");
  CHECK_FALSE(IsHandshakeRefusal(HandshakeFailureLabel(
      CloseCause::kPeerDisconnected, session::ParseDisconnectReason(std::string("x authentication failed y")))));
}

TEST_CASE("ready sessions' closes are labelled from their close cause") {
  CHECK(Close(CloseCause::kPeerDisconnected) == "peer_disconnected");
  CHECK(Close(CloseCause::kConnectionLost) == "connection_lost");
  CHECK(Close(CloseCause::kPeerSilent) == "peer_silent");
  CHECK(Close(CloseCause::kMalformedFrame) == "protocol_violation");
  CHECK(Close(CloseCause::kMessageBeforeHandshake) == "protocol_violation");
  CHECK(Close(CloseCause::kBadMessage) == "protocol_violation");
  CHECK(Close(CloseCause::kOperator) == "operator");
  CHECK(Close(CloseCause::kShutdown) == "shutdown");
  CHECK(Close(CloseCause::kDuplicate) == "duplicate");
  CHECK(Close(CloseCause::kPeerRestarted) == "peer_restarted");
  CHECK(Close(CloseCause::kIdle) == "idle");
  CHECK(Close(CloseCause::kTooManyPeers) == "other");
  CHECK(Close(CloseCause::kLocalError) == "other");
  CHECK(Close(CloseCause::kNoRandomToken) == "other");
}

TEST_CASE("failed loads and stores are labelled from their cause") {
  // A load's label comes from its cause, whatever its reason says.
  const auto load = [](session::JobFailure cause) { return std::string(kLoadFailureLabels[LoadFailureLabel(cause)]); };
  CHECK(load(session::JobFailure::kTimeout) == "timeout");
  CHECK(load(session::JobFailure::kRequestFinished) == "request_finished");
  CHECK(load(session::JobFailure::kPeerFailed) == "peer_failed");
  CHECK(load(session::JobFailure::kIncomplete) == "incomplete");
  CHECK(load(session::JobFailure::kChecksum) == "checksum");
  CHECK(load(session::JobFailure::kShutdown) == "shutdown");
  CHECK(load(session::JobFailure::kSessionClosed) == "session_closed");
  CHECK(load(session::JobFailure::kSlotsUnmapped) == "session_closed");

  const auto store = [](session::JobFailure cause) {
    return std::string(kStoreFailureLabels[StoreFailureLabel(cause)]);
  };
  CHECK(store(session::JobFailure::kTimeout) == "timeout");
  CHECK(store(session::JobFailure::kUnfetched) == "unfetched");
  CHECK(store(session::JobFailure::kAborted) == "aborted");
  CHECK(store(session::JobFailure::kShutdown) == "shutdown");
  CHECK(store(session::JobFailure::kSessionClosed) == "session_closed");
  CHECK(store(session::JobFailure::kNotServed) == "other");
  CHECK(store(session::JobFailure::kRefused) == "other");
}

}  // namespace
}  // namespace kvpeer::daemon
