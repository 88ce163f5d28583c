#include "daemon/peer/peer_metrics.h"

#include <spdlog/spdlog.h>

#include "base/hex.h"
#include "daemon/metrics/peer_histograms.h"
#include "protocol/block_checksum.h"
#include "protocol/codec.h"

namespace kvpeer::daemon {

PeerMetrics::PeerMetrics()
    : lookup_round_trip_(peer_histograms::kLookupRoundTrip),
      load_seconds_succeeded_(peer_histograms::kLoadSeconds),
      load_seconds_failed_(peer_histograms::kLoadSeconds),
      load_bytes_(peer_histograms::kLoadBytes) {}

PeerSnapshot PeerMetrics::Snapshot(const std::string& peer_id, PeerState state,
                                   std::chrono::system_clock::time_point since,
                                   const std::optional<std::string>& last_error, const PeerCounters& counters,
                                   const PeerConnection* connection) const {
  PeerSnapshot snapshot;
  snapshot.peer_id = peer_id;
  snapshot.state = state;
  snapshot.since = since;
  snapshot.last_error = last_error;
  snapshot.counters = counters;
  if (connection == nullptr) return snapshot;
  const session::PeerSession& session = connection->session();
  snapshot.rtt = session.rtt();
  snapshot.counters.bytes_sent += connection->bytes_sent();
  snapshot.counters.bytes_received += connection->bytes_received();
  snapshot.counters.stats += connection->stats();
  snapshot.loads_in_flight = session.LoadsInFlight();
  snapshot.rounds_serving = session.RoundsServing();
  snapshot.rounds_open = session.RoundsOpen();
  snapshot.round_key_bytes = session.RoundKeyBytes();
  snapshot.queued_bytes = connection->queued_bytes();
  snapshot.queued_bytes_peak = connection->queued_bytes_peak();
  snapshot.write_queue_frames = connection->write_queue_depth();
  snapshot.features = session.features_on();
  return snapshot;
}

void PeerMetrics::RecordLoadStart(session::JobId job_id, uint64_t bytes) {
  // A load asked again after a hand-back keeps its first start: its latency
  // is the engine's wait.
  load_starts_.try_emplace(job_id, LoadStart{std::chrono::steady_clock::now(), bytes});
}

void PeerMetrics::RecordLoadResult(PeerCounters* counters, const std::string& peer, const session::JobResult& result) {
  auto start = load_starts_.find(result.job_id);
  std::optional<LoadStart> started;
  if (start != load_starts_.end()) {
    started = start->second;
    load_starts_.erase(start);
  }
  const double seconds = started ? peer_histograms::Seconds(std::chrono::steady_clock::now() - started->at) : 0;
  if (result.success) {
    if (counters != nullptr) ++counters->loads_succeeded;
    if (started) {
      load_seconds_succeeded_.Observe(seconds);
      load_bytes_.Observe(static_cast<double>(started->bytes));
    }
    spdlog::debug("peer {}: load (node job {}) of kv_request_id {} done: {} bytes in {:.3f} ms", peer, result.job_id,
                  result.kv_request_id, started ? started->bytes : 0, seconds * 1e3);
    return;
  }
  if (counters != nullptr) ++counters->loads_failed[LoadFailureLabel(result.failure)];
  if (started) load_seconds_failed_.Observe(seconds);
  spdlog::info("peer {}: load (node job {}) of kv_request_id {} failed: {}", peer, result.job_id, result.kv_request_id,
               result.reason);
}

// A block whose landed bytes did not match its producer's xxh3
// (wire-protocol.md, "Features and block checksums"): its load has failed
// (counted with the load, reason "checksum"); this names the block for the
// operator (docs/operations.md, "When checksum_failures rises").
void PeerMetrics::RecordChecksumFailure(const std::string& peer, const session::ChecksumFailure& failure) {
  if (counters_ != nullptr) counters_->Add(Counter::kChecksumFailures);
  // A key is at most 4 KiB; its first 64 bytes name it in a log line.
  constexpr size_t kShownKeyBytes = 64;
  const std::string_view key = failure.key;
  spdlog::warn(
      "peer {}: checksum mismatch: kv_request_id {} key {}{} (slot {}): the peer sent xxh3 {}, the landed "
      "bytes hash to {}; the load failed",
      peer, failure.kv_request_id, ToHex(key.substr(0, kShownKeyBytes)), key.size() > kShownKeyBytes ? "..." : "",
      failure.block_index, protocol::ChecksumHex(failure.expected), protocol::ChecksumHex(failure.landed));
}

void PeerMetrics::RecordLookupRoundTrip(session::Duration round_trip) {
  lookup_round_trip_.Observe(peer_histograms::Seconds(round_trip));
}

void PeerMetrics::RecordClose(const PeerConnection& connection) {
  const std::string& reason = connection.session().close_reason();
  const std::string& peer_id = connection.session().peer_id();
  // An accepted connection that never became ready only claimed its id.
  const bool claimed = !connection.dialled() && !connection.ever_ready();
  const std::string peer = peer_id.empty() ? "(unidentified)"
                           : claimed       ? "(unauthenticated, claims " + peer_id + ")"
                                           : peer_id;
  const std::string address = connection.remote_address();
  const auto& violation = connection.violation();
  const size_t handshake_kind =
      HandshakeFailureLabel(connection.session().close_cause(), connection.session().peer_disconnect_reason());
  const bool refused = !connection.closed_by_owner() && IsHandshakeRefusal(handshake_kind);
  if (!connection.ever_ready() || refused) {
    // Closing a connection on purpose (duplicate, shutdown, operator)
    // before its handshake completed is no failure of the handshake; nor is
    // the peer settling a crossed dial ("duplicate": its other connection
    // with this node survives).
    const bool peer_kept_another =
        connection.session().close_cause() == session::CloseCause::kPeerDisconnected &&
        connection.session().peer_disconnect_reason() == session::PeerDisconnectReason::kDuplicate;
    if (connection.closed_by_owner() || peer_kept_another) {
      spdlog::info("peer {} ({}): closed during the handshake: {}", peer, address, reason);
      return;
    }
    const size_t kind = handshake_kind;
    ++handshake_failures_[kind];
    if (violation && kHandshakeFailureLabels[kind] == "protocol_violation") ++violations_[*violation];
    const std::string& detail = connection.session().authentication_detail();
    spdlog::warn("peer {} ({}): handshake failed ({}): {}{}", peer, address, kHandshakeFailureLabels[kind], reason,
                 detail.empty() ? "" : " (" + detail + ")");
    return;
  }
  const size_t kind = SessionCloseLabel(connection.session().close_cause());
  ++sessions_closed_[kind];
  const ConnectionStats& stats = connection.stats();
  uint64_t frames_sent = 0, frames_received = 0;
  for (uint64_t n : stats.frames_sent) frames_sent += n;
  for (uint64_t n : stats.frames_received) frames_received += n;
  if (violation) {
    ++violations_[*violation];
    spdlog::warn("peer {} ({}): protocol violation ({}): {}; disconnected", peer, address, *violation, reason);
    return;
  }
  // The idle close is routine, not a fault: its line says which setting did
  // it (the reason reads "closed after N s without work").
  const bool idle = connection.session().close_cause() == session::CloseCause::kIdle;
  const char* setting = idle ? " (idle-peer-timeout-s)" : "";
  spdlog::info("peer {} ({}): session closed ({}): {}{}; sent {} frames / {} bytes, received {} frames / {} bytes",
               peer, address, kSessionCloseLabels[kind], reason, setting, frames_sent, connection.bytes_sent(),
               frames_received, connection.bytes_received());
}

// Wire spec, "Authentication and authorisation": the side that finds a
// missing or wrong proof closes with "authentication failed"; the other side
// learns it from the disconnect. Both are counted (status.counters) and
// logged by RecordClose.
void PeerMetrics::CountAuthFailure(const PeerConnection& connection) {
  if (counters_ == nullptr) return;
  // (Without a key of its own a node may have been ready already.)
  const session::PeerSession& session = connection.session();
  if (session.authentication_failed()) {
    counters_->Add(Counter::kAuthFailures);  // the peer's proof was missing or wrong
  } else if (session.peer_refused_authentication()) {
    counters_->Add(Counter::kAuthRejectedByPeer);  // the peer refused our proof
  }
}

void PeerMetrics::CollectMetrics(metrics::Registry& registry, size_t handshaking, size_t unbound_store_jobs) const {
  auto& handshakes =
      registry.Counter("kvpeer_peer_handshake_failures_total",
                       "Peer connections that ended before the handshake completed, by reason.", {"reason"});
  for (size_t i = 0; i < kHandshakeFailureLabels.size(); ++i) {
    handshakes.Add({kHandshakeFailureLabels[i]}, handshake_failures_[i]);
  }
  auto& closed =
      registry.Counter("kvpeer_peer_sessions_closed_total", "Ready peer sessions that ended, by reason.", {"reason"});
  for (size_t i = 0; i < kSessionCloseLabels.size(); ++i) closed.Add({kSessionCloseLabels[i]}, sessions_closed_[i]);
  auto& violations =
      registry.Counter("kvpeer_peer_protocol_violations_total",
                       "Protocol violations by peers that this node disconnected for, by reason.", {"reason"});
  for (const auto& [label, count] : violations_) violations.Add({label}, count);
  auto& refused = registry.Counter("kvpeer_peer_connections_refused_total",
                                   "Inbound peer connections refused before the handshake, by reason.", {"reason"});
  for (size_t i = 0; i < kConnectionRefusalLabels.size(); ++i) refused.Add({kConnectionRefusalLabels[i]}, refused_[i]);
  registry.Gauge("kvpeer_peer_handshaking_connections", "Peer connections not ready yet (status.handshaking).")
      .Set({}, static_cast<double>(handshaking));
  registry
      .Counter("kvpeer_peer_accept_failures_total", "Failed accepts on the peer listener (e.g. out of descriptors).")
      .Add({}, accept_failures_);
  registry
      .Counter("kvpeer_peer_entries_reaped_total",
               "Peer entries removed after peer-reap-after-s without a connection or waiting work.")
      .Add({}, peers_reaped_);
  registry.Gauge("kvpeer_unbound_store_jobs", "Store jobs waiting for a peer to fetch them (not bound to a session).")
      .Set({}, static_cast<double>(unbound_store_jobs));

  registry
      .Histogram("kvpeer_lookup_round_trip_seconds",
                 "Time from sending a lookup to a peer to receiving its lookup_resp.",
                 peer_histograms::kLookupRoundTrip)
      .Merge({}, lookup_round_trip_);
  auto& load_seconds =
      registry.Histogram("kvpeer_load_duration_seconds", "Time from a load's fetch to its result, by outcome.",
                         peer_histograms::kLoadSeconds, {"outcome"});
  load_seconds.Merge({"succeeded"}, load_seconds_succeeded_);
  load_seconds.Merge({"failed"}, load_seconds_failed_);
  registry
      .Histogram("kvpeer_load_transfer_bytes", "Bytes moved by each successful load (blocks times block_len).",
                 peer_histograms::kLoadBytes)
      .Merge({}, load_bytes_);
}

}  // namespace kvpeer::daemon
