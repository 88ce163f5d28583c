#include "daemon/metrics/reason_labels.h"

namespace kvpeer::daemon {
namespace {

using session::CloseCause;
using session::PeerDisconnectReason;

template <size_t N>
constexpr size_t IndexOf(const std::array<std::string_view, N>& labels, std::string_view label) {
  for (size_t i = 0; i < N; ++i) {
    if (labels[i] == label) return i;
  }
  return N - 1;
}

// A peer's disconnect before the handshake completed, by its exact reason.
size_t PeerDisconnectHandshakeLabel(PeerDisconnectReason reason) {
  const auto& labels = kHandshakeFailureLabels;
  switch (reason) {
    case PeerDisconnectReason::kAuthenticationFailed:
      return IndexOf(labels, "authentication");
    case PeerDisconnectReason::kNodeNotConfigured:
      return IndexOf(labels, "peer_not_configured");
    case PeerDisconnectReason::kShuttingDown:
      return IndexOf(labels, "peer_shutting_down");
    case PeerDisconnectReason::kHandshakeTimedOut:
      return IndexOf(labels, "timeout");
    // The peer closed on purpose, or said something else (a mismatch it
    // found, in its own words): none of it may choose a label here.
    case PeerDisconnectReason::kUnspecified:
    case PeerDisconnectReason::kDuplicate:
    case PeerDisconnectReason::kTooManyPeers:
    case PeerDisconnectReason::kPeerRestarted:
    case PeerDisconnectReason::kDisconnectedByOperator:
    case PeerDisconnectReason::kIdle:
      break;
  }
  return labels.size() - 1;
}

}  // namespace

size_t HandshakeFailureLabel(CloseCause cause, PeerDisconnectReason peer_reason) {
  const auto& labels = kHandshakeFailureLabels;
  switch (cause) {
    case CloseCause::kAuthentication:
      return IndexOf(labels, "authentication");
    case CloseCause::kConfigFingerprint:
      return IndexOf(labels, "config_fingerprint");
    case CloseCause::kHashSeed:
      return IndexOf(labels, "hash_seed");
    case CloseCause::kBlockLen:
      return IndexOf(labels, "block_len");
    case CloseCause::kWireVersion:
      return IndexOf(labels, "wire_version");
    case CloseCause::kPeerId:
      return IndexOf(labels, "peer_id");
    case CloseCause::kSelfConnection:
      return IndexOf(labels, "self_connection");
    case CloseCause::kTls:
      return IndexOf(labels, "tls");
    case CloseCause::kHandshakeTimeout:
      return IndexOf(labels, "timeout");
    case CloseCause::kConnectFailed:
      return IndexOf(labels, "connect_failed");
    case CloseCause::kMalformedFrame:
    case CloseCause::kMessageBeforeHandshake:
    case CloseCause::kBadMessage:
      return IndexOf(labels, "protocol_violation");
    case CloseCause::kConnectionLost:
    case CloseCause::kPeerSilent:
      return IndexOf(labels, "connection_lost");
    case CloseCause::kPeerDisconnected:
      return PeerDisconnectHandshakeLabel(peer_reason);
    // Closes this node's owner chose (RecordClose does not count them as
    // failures) and failures of our own making.
    case CloseCause::kOpen:
    case CloseCause::kLocalError:
    case CloseCause::kNoRandomToken:
    case CloseCause::kOperator:
    case CloseCause::kShutdown:
    case CloseCause::kDuplicate:
    case CloseCause::kPeerRestarted:
    case CloseCause::kTooManyPeers:
    case CloseCause::kIdle:
      break;  // only a ready session closes as idle
  }
  return labels.size() - 1;
}

bool IsHandshakeRefusal(size_t kind) { return kind <= IndexOf(kHandshakeFailureLabels, "self_connection"); }

size_t SessionCloseLabel(CloseCause cause) {
  const auto& labels = kSessionCloseLabels;
  switch (cause) {
    case CloseCause::kPeerDisconnected:
      return IndexOf(labels, "peer_disconnected");
    case CloseCause::kConnectionLost:
      return IndexOf(labels, "connection_lost");
    case CloseCause::kPeerSilent:
      return IndexOf(labels, "peer_silent");
    case CloseCause::kMalformedFrame:
    case CloseCause::kMessageBeforeHandshake:
    case CloseCause::kBadMessage:
      return IndexOf(labels, "protocol_violation");
    case CloseCause::kOperator:
      return IndexOf(labels, "operator");
    case CloseCause::kShutdown:
      return IndexOf(labels, "shutdown");
    case CloseCause::kDuplicate:
      return IndexOf(labels, "duplicate");
    case CloseCause::kPeerRestarted:
      return IndexOf(labels, "peer_restarted");
    case CloseCause::kIdle:
      return IndexOf(labels, "idle");
    // Handshake causes never end a ready session (a connect after ready is
    // kBadMessage); the rest have no label of their own.
    case CloseCause::kOpen:
    case CloseCause::kAuthentication:
    case CloseCause::kConfigFingerprint:
    case CloseCause::kHashSeed:
    case CloseCause::kBlockLen:
    case CloseCause::kWireVersion:
    case CloseCause::kPeerId:
    case CloseCause::kSelfConnection:
    case CloseCause::kLocalError:
    case CloseCause::kNoRandomToken:
    case CloseCause::kHandshakeTimeout:
    case CloseCause::kConnectFailed:
    case CloseCause::kTls:
    case CloseCause::kTooManyPeers:
      break;
  }
  return labels.size() - 1;
}

size_t LoadFailureLabel(session::JobFailure cause) {
  const auto& labels = kLoadFailureLabels;
  switch (cause) {
    case session::JobFailure::kTimeout:
      return IndexOf(labels, "timeout");
    case session::JobFailure::kRequestFinished:
      return IndexOf(labels, "request_finished");
    case session::JobFailure::kPeerFailed:
      return IndexOf(labels, "peer_failed");
    case session::JobFailure::kIncomplete:
      return IndexOf(labels, "incomplete");
    case session::JobFailure::kChecksum:
      return IndexOf(labels, "checksum");
    case session::JobFailure::kShutdown:
      return IndexOf(labels, "shutdown");
    // The session's close; slots that vanished were counted with it before
    // causes were values. The rest are store causes, never a load's.
    case session::JobFailure::kNone:
    case session::JobFailure::kSlotsUnmapped:
    case session::JobFailure::kSessionClosed:
    case session::JobFailure::kUnfetched:
    case session::JobFailure::kAborted:
    case session::JobFailure::kNotServed:
    case session::JobFailure::kRefused:
      break;
  }
  return IndexOf(labels, "session_closed");
}

size_t StoreFailureLabel(session::JobFailure cause) {
  const auto& labels = kStoreFailureLabels;
  switch (cause) {
    case session::JobFailure::kTimeout:
      return IndexOf(labels, "timeout");
    case session::JobFailure::kUnfetched:
      return IndexOf(labels, "unfetched");
    case session::JobFailure::kAborted:
      return IndexOf(labels, "aborted");
    case session::JobFailure::kShutdown:
      return IndexOf(labels, "shutdown");
    case session::JobFailure::kSessionClosed:
      return IndexOf(labels, "session_closed");
    // A torn source or a round that ended otherwise, a refused store; the
    // rest are load causes, never a store's.
    case session::JobFailure::kNone:
    case session::JobFailure::kNotServed:
    case session::JobFailure::kRefused:
    case session::JobFailure::kRequestFinished:
    case session::JobFailure::kPeerFailed:
    case session::JobFailure::kIncomplete:
    case session::JobFailure::kChecksum:
    case session::JobFailure::kSlotsUnmapped:
      break;
  }
  return IndexOf(labels, "other");
}

}  // namespace kvpeer::daemon
