// PeerManager, the reporting half: what the node tells operators about its
// peers. The log line and counters of every closed session and finished
// load, `status`'s peers table and the Prometheus metrics.
#include "daemon/peer_manager.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include "base/hex.h"
#include "daemon/peer_histograms.h"
#include "daemon/rfc3339.h"
#include "protocol/block_checksum.h"
#include "protocol/codec.h"
#include "protocol/type_names.h"

namespace kvpeer::daemon {

void PeerManager::RecordLoadResult(Peer* entry, const std::string& peer, const session::JobResult& result) {
  auto start = load_starts_.find(result.job_id);
  std::optional<LoadStart> started;
  if (start != load_starts_.end()) {
    started = start->second;
    load_starts_.erase(start);
  }
  const double seconds = started ? peer_histograms::Seconds(std::chrono::steady_clock::now() - started->at) : 0;
  if (result.success) {
    if (entry != nullptr) ++entry->loads_succeeded;
    if (started) {
      load_seconds_succeeded_.Observe(seconds);
      load_bytes_.Observe(static_cast<double>(started->bytes));
    }
    spdlog::debug("peer {}: load (node job {}) of kv_request_id {} done: {} bytes in {:.3f} ms", peer,
                  result.job_id, result.kv_request_id, started ? started->bytes : 0, seconds * 1e3);
    return;
  }
  if (entry != nullptr) ++entry->loads_failed[LoadFailureLabel(result.failure)];
  if (started) load_seconds_failed_.Observe(seconds);
  spdlog::info("peer {}: load (node job {}) of kv_request_id {} failed: {}", peer, result.job_id,
               result.kv_request_id, result.reason);
}

// A block whose landed bytes did not match its producer's xxh3
// (wire-protocol.md section 7): its load has failed (counted with the load,
// reason "checksum"); this names the block for the operator
// (docs/operations.md, "When checksum_failures rises").
void PeerManager::RecordChecksumFailure(const std::string& peer, const session::ChecksumFailure& failure) {
  if (counters_ != nullptr) counters_->Add("checksum_failures");
  // A key is at most 4 KiB; its first 64 bytes name it in a log line.
  constexpr size_t kShownKeyBytes = 64;
  const std::string_view key = failure.key;
  spdlog::warn("peer {}: checksum mismatch: kv_request_id {} key {}{} (slot {}): the peer sent xxh3 {}, the landed "
               "bytes hash to {}; the load failed",
               peer, failure.kv_request_id, ToHex(key.substr(0, kShownKeyBytes)),
               key.size() > kShownKeyBytes ? "..." : "", failure.block_index, protocol::ChecksumHex(failure.expected),
               protocol::ChecksumHex(failure.landed));
}

void PeerManager::OnLookupAnswered(session::Duration round_trip) { lookup_round_trip_.Observe(peer_histograms::Seconds(round_trip)); }

void PeerManager::RecordClose(const PeerConnection& connection) {
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
    // before its handshake completed is no failure of the handshake.
    if (connection.closed_by_owner()) {
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
  spdlog::info("peer {} ({}): session closed ({}): {}; sent {} frames / {} bytes, received {} frames / {} bytes",
               peer, address, kSessionCloseLabels[kind], reason, frames_sent, connection.bytes_sent(),
               frames_received, connection.bytes_received());
}

// Wire spec section 5: the side that finds a missing or wrong proof closes
// with "authentication failed"; the other side learns it from the
// disconnect. Both are counted (status.counters) and logged by RecordClose.
void PeerManager::CountAuthFailure(const PeerConnection& connection) {
  if (counters_ == nullptr) return;
  // (Without a key of its own a node may have been ready already.)
  const session::PeerSession& session = connection.session();
  if (session.authentication_failed()) {
    counters_->Add("auth_failures");  // the peer's proof was missing or wrong
  } else if (session.peer_refused_authentication()) {
    counters_->Add("auth_rejected_by_peer");  // the peer refused our proof
  }
}

boost::json::array PeerManager::PeersStatus() const {
  boost::json::array peers;
  for (const auto& [peer_id, entry] : peers_) {
    boost::json::object peer;
    const PeerConnection* connection = entry.connection.get();
    peer["peer_id"] = peer_id;
    peer["state"] = PeerStateName(entry.state);
    peer["since"] = FormatRfc3339(entry.since);
    auto rtt = connection ? connection->session().rtt() : std::nullopt;
    if (rtt) {
      peer["rtt_us"] = std::chrono::duration_cast<std::chrono::microseconds>(*rtt).count();
    } else {
      peer["rtt_us"] = nullptr;
    }
    peer["bytes_sent"] = entry.bytes_sent_closed + (connection ? connection->bytes_sent() : 0);
    peer["bytes_received"] = entry.bytes_received_closed + (connection ? connection->bytes_received() : 0);
    peer["loads_in_flight"] = connection ? connection->session().LoadsInFlight() : 0;
    peer["rounds_serving"] = connection ? connection->session().RoundsServing() : 0;
    // Beyond the spec's fields: what the limits watch (max-rounds-per-peer,
    // max-queued-bytes), for the current connection.
    peer["rounds_open"] = connection ? connection->session().RoundsOpen() : 0;
    peer["round_key_bytes"] = connection ? connection->session().RoundKeyBytes() : 0;  // --max-round-key-bytes
    peer["queued_bytes"] = connection ? connection->queued_bytes() : 0;
    peer["queued_bytes_peak"] = connection ? connection->queued_bytes_peak() : 0;
    // Ours: the wire features on for the current session (wire-protocol.md
    // section 7), empty until it is ready.
    boost::json::array features;
    if (connection != nullptr) {
      for (const std::string& name : connection->session().features_on()) features.emplace_back(name);
    }
    peer["features"] = std::move(features);
    if (entry.last_error) {
      peer["last_error"] = *entry.last_error;
    } else {
      peer["last_error"] = nullptr;
    }
    peers.push_back(std::move(peer));
  }
  return peers;
}

void PeerManager::CollectMetrics(metrics::Registry& registry) const {
  auto& frames_sent = registry.Counter("kvpeer_peer_frames_sent_total", "Frames written to the peer, by message type.",
                                       {"peer", "type"});
  auto& frames_received = registry.Counter("kvpeer_peer_frames_received_total",
                                           "Frames received from the peer, by message type.", {"peer", "type"});
  auto& keys_sent = registry.Counter("kvpeer_peer_lookup_keys_sent_total",
                                     "Keys this node probed on the peer (keys of lookup messages sent).", {"peer"});
  auto& hits_received = registry.Counter("kvpeer_peer_lookup_hits_received_total",
                                         "Keys the peer answered hit (in lookup_resp messages received).", {"peer"});
  auto& keys_served = registry.Counter("kvpeer_peer_lookup_keys_served_total",
                                       "Keys the peer probed on this node (keys of lookup messages received).",
                                       {"peer"});
  auto& hits_served = registry.Counter("kvpeer_peer_lookup_hits_served_total",
                                       "Keys of the peer's probes this node answered hit.", {"peer"});
  auto& loads = registry.Counter("kvpeer_peer_loads_total",
                                 "Loads from the peer by outcome (succeeded, failed, rejected) and reason.",
                                 {"peer", "outcome", "reason"});
  auto& dials = registry.Counter("kvpeer_peer_dials_total", "Connection attempts this node made to the peer.", {"peer"});
  auto& sessions = registry.Counter("kvpeer_peer_sessions_total",
                                    "Sessions with the peer that completed the handshake.", {"peer"});
  auto& queue = registry.Gauge("kvpeer_peer_write_queue_frames",
                               "Frames queued on the peer's connection and not yet written.", {"peer"});
  auto& queue_bytes = registry.Gauge("kvpeer_peer_write_queue_bytes",
                                     "Bytes of the frames queued on the peer's connection (max-queued-bytes applies).",
                                     {"peer"});
  auto& rtt = registry.Gauge("kvpeer_peer_rtt_seconds", "Last ping round trip to the peer.", {"peer"});
  const auto type_name = [](size_t index) {
    return index < protocol::kKnownTypeNames.size() ? protocol::kKnownTypeNames[index] : std::string_view("unknown");
  };
  for (const auto& [peer, entry] : peers_) {
    const PeerConnection* connection = entry.connection.get();
    ConnectionStats stats = entry.stats_closed;
    if (connection != nullptr) stats += connection->stats();
    for (size_t i = 0; i < ConnectionStats::kMessageKinds; ++i) {
      if (stats.frames_sent[i] > 0) frames_sent.Add({peer, type_name(i)}, stats.frames_sent[i]);
      if (stats.frames_received[i] > 0) frames_received.Add({peer, type_name(i)}, stats.frames_received[i]);
    }
    keys_sent.Add({peer}, stats.lookup_keys_sent);
    hits_received.Add({peer}, stats.lookup_hits_received);
    keys_served.Add({peer}, stats.lookup_keys_served);
    hits_served.Add({peer}, stats.lookup_hits_served);
    loads.Add({peer, "succeeded", "none"}, entry.loads_succeeded);
    for (size_t i = 0; i < kLoadFailureLabels.size(); ++i) {
      if (entry.loads_failed[i] > 0) loads.Add({peer, "failed", kLoadFailureLabels[i]}, entry.loads_failed[i]);
    }
    if (entry.loads_rejected > 0) loads.Add({peer, "rejected", "peer_unavailable"}, entry.loads_rejected);
    dials.Add({peer}, entry.dials);
    sessions.Add({peer}, entry.sessions_ready);
    queue.Set({peer}, connection != nullptr ? static_cast<double>(connection->write_queue_depth()) : 0.0);
    queue_bytes.Set({peer}, connection != nullptr ? static_cast<double>(connection->queued_bytes()) : 0.0);
    if (auto measured = connection != nullptr ? connection->session().rtt() : std::nullopt) {
      rtt.Set({peer}, peer_histograms::Seconds(*measured));
    }
  }

  auto& handshakes = registry.Counter("kvpeer_peer_handshake_failures_total",
                                      "Peer connections that ended before the handshake completed, by reason.",
                                      {"reason"});
  for (size_t i = 0; i < kHandshakeFailureLabels.size(); ++i) {
    handshakes.Add({kHandshakeFailureLabels[i]}, handshake_failures_[i]);
  }
  auto& closed = registry.Counter("kvpeer_peer_sessions_closed_total",
                                  "Ready peer sessions that ended, by reason.", {"reason"});
  for (size_t i = 0; i < kSessionCloseLabels.size(); ++i) closed.Add({kSessionCloseLabels[i]}, sessions_closed_[i]);
  auto& violations = registry.Counter("kvpeer_peer_protocol_violations_total",
                                      "Protocol violations by peers that this node disconnected for, by reason.",
                                      {"reason"});
  for (const auto& [label, count] : violations_) violations.Add({label}, count);
  auto& refused = registry.Counter("kvpeer_peer_connections_refused_total",
                                   "Inbound peer connections refused before the handshake, by reason.", {"reason"});
  refused.Add({"allow_cidr"}, refused_allowlist_);
  refused.Add({"unavailable"}, refused_unavailable_);
  refused.Add({"max_handshaking"}, refused_max_handshaking_);
  refused.Add({"max_handshaking_per_source"}, refused_max_handshaking_per_source_);
  registry.Gauge("kvpeer_peer_handshaking_connections", "Peer connections not ready yet (status.handshaking).")
      .Set({}, static_cast<double>(Handshaking()));
  registry.Counter("kvpeer_peer_accept_failures_total", "Failed accepts on the peer listener (e.g. out of descriptors).")
      .Add({}, accept_failures_);
  registry.Counter("kvpeer_peer_entries_reaped_total",
                   "Peer entries removed after peer-reap-after-s without a connection or waiting work.")
      .Add({}, peers_reaped_);
  registry.Gauge("kvpeer_unbound_store_jobs", "Store jobs waiting for a peer to fetch them (not bound to a session).")
      .Set({}, static_cast<double>(unbound_supply_.size()));

  registry
      .Histogram("kvpeer_lookup_round_trip_seconds",
                 "Time from sending a lookup to a peer to receiving its lookup_resp.", peer_histograms::kLookupRoundTrip)
      .Merge({}, lookup_round_trip_);
  auto& load_seconds = registry.Histogram("kvpeer_load_duration_seconds",
                                          "Time from a load's fetch to its result, by outcome.", peer_histograms::kLoadSeconds,
                                          {"outcome"});
  load_seconds.Merge({"succeeded"}, load_seconds_succeeded_);
  load_seconds.Merge({"failed"}, load_seconds_failed_);
  registry
      .Histogram("kvpeer_load_transfer_bytes", "Bytes moved by each successful load (blocks times block_len).",
                 peer_histograms::kLoadBytes)
      .Merge({}, load_bytes_);
}

}  // namespace kvpeer::daemon
