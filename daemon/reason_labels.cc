#include "daemon/reason_labels.h"

#include <initializer_list>

namespace kvpeer::daemon {
namespace {

bool Has(std::string_view text, std::initializer_list<std::string_view> needles) {
  for (std::string_view needle : needles) {
    if (text.find(needle) != std::string_view::npos) return true;
  }
  return false;
}

template <size_t N>
constexpr size_t IndexOf(const std::array<std::string_view, N>& labels, std::string_view label) {
  for (size_t i = 0; i < N; ++i) {
    if (labels[i] == label) return i;
  }
  return N - 1;
}

// Why a connection ended, as this node's I/O or the session words it
// (peer_connection.cc, peer_session.cc).
bool ConnectionLost(std::string_view reason) {
  return Has(reason, {"peer closed the connection", "connection lost", "write failed"});
}

}  // namespace

size_t ClassifyHandshakeFailure(std::string_view reason, bool violation) {
  const auto& labels = kHandshakeFailureLabels;
  // The peer's disconnect reason is quoted after "peer disconnected: ", so a
  // mismatch the peer found is classified like one found here.
  if (Has(reason, {"authentication failed"})) return IndexOf(labels, "authentication");
  if (Has(reason, {"config_fingerprint mismatch"})) return IndexOf(labels, "config_fingerprint");
  if (Has(reason, {"hash_seed mismatch"})) return IndexOf(labels, "hash_seed");
  if (Has(reason, {"block_len mismatch"})) return IndexOf(labels, "block_len");
  if (Has(reason, {"wire_major mismatch"})) return IndexOf(labels, "wire_version");
  if (Has(reason, {"peer_id mismatch", "connect_ack.peer_id"})) return IndexOf(labels, "peer_id");
  if (Has(reason, {"epoch equals ours"})) return IndexOf(labels, "self_connection");
  if (Has(reason, {"TLS handshake"})) return IndexOf(labels, "tls");  // daemon/peer_connection.cc
  if (Has(reason, {"handshake timed out"})) return IndexOf(labels, "timeout");
  if (Has(reason, {"cannot connect to"})) return IndexOf(labels, "connect_failed");
  if (violation) return IndexOf(labels, "protocol_violation");
  if (Has(reason, {"node not configured"})) return IndexOf(labels, "peer_not_configured");
  if (Has(reason, {"shutting down"})) return IndexOf(labels, "peer_shutting_down");
  if (ConnectionLost(reason) || Has(reason, {"peer silent"})) return IndexOf(labels, "connection_lost");
  return labels.size() - 1;
}

bool IsHandshakeRefusal(size_t kind) { return kind <= IndexOf(kHandshakeFailureLabels, "self_connection"); }

size_t ClassifySessionClose(std::string_view reason, bool violation) {
  const auto& labels = kSessionCloseLabels;
  if (violation) return IndexOf(labels, "protocol_violation");
  if (reason.starts_with("peer disconnected")) return IndexOf(labels, "peer_disconnected");
  if (ConnectionLost(reason)) return IndexOf(labels, "connection_lost");
  if (reason.starts_with("peer silent")) return IndexOf(labels, "peer_silent");
  if (reason.starts_with("disconnected by operator")) return IndexOf(labels, "operator");
  if (Has(reason, {"shutting down"})) return IndexOf(labels, "shutdown");
  if (reason == "duplicate") return IndexOf(labels, "duplicate");
  if (reason == "peer restarted") return IndexOf(labels, "peer_restarted");
  return labels.size() - 1;
}

size_t LoadFailureLabel(session::JobFailure cause) {
  const auto& labels = kLoadFailureLabels;
  switch (cause) {
    case session::JobFailure::kTimeout: return IndexOf(labels, "timeout");
    case session::JobFailure::kRequestFinished: return IndexOf(labels, "request_finished");
    case session::JobFailure::kPeerFailed: return IndexOf(labels, "peer_failed");
    case session::JobFailure::kIncomplete: return IndexOf(labels, "incomplete");
    case session::JobFailure::kChecksum: return IndexOf(labels, "checksum");
    case session::JobFailure::kShutdown: return IndexOf(labels, "shutdown");
    // The session's close; slots that vanished were counted with it before
    // causes were values. The rest are store causes, never a load's.
    case session::JobFailure::kNone:
    case session::JobFailure::kSlotsUnmapped:
    case session::JobFailure::kSessionClosed:
    case session::JobFailure::kUnfetched:
    case session::JobFailure::kAborted:
    case session::JobFailure::kNotServed:
    case session::JobFailure::kRefused: break;
  }
  return IndexOf(labels, "session_closed");
}

size_t StoreFailureLabel(session::JobFailure cause) {
  const auto& labels = kStoreFailureLabels;
  switch (cause) {
    case session::JobFailure::kTimeout: return IndexOf(labels, "timeout");
    case session::JobFailure::kUnfetched: return IndexOf(labels, "unfetched");
    case session::JobFailure::kAborted: return IndexOf(labels, "aborted");
    case session::JobFailure::kShutdown: return IndexOf(labels, "shutdown");
    case session::JobFailure::kSessionClosed: return IndexOf(labels, "session_closed");
    // A torn source or a round that ended otherwise, a refused store; the
    // rest are load causes, never a store's.
    case session::JobFailure::kNone:
    case session::JobFailure::kNotServed:
    case session::JobFailure::kRefused:
    case session::JobFailure::kRequestFinished:
    case session::JobFailure::kPeerFailed:
    case session::JobFailure::kIncomplete:
    case session::JobFailure::kChecksum:
    case session::JobFailure::kSlotsUnmapped: break;
  }
  return IndexOf(labels, "other");
}

}  // namespace kvpeer::daemon
