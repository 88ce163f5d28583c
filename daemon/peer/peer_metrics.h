// PeerMetrics: what the node tells operators about its peers. PeerManager
// owns one and reports every event to it: a closed connection (counted as a
// failed handshake or a closed session, and logged as one line), a finished
// load (its latency and size), a checksum mismatch, a refused or failed
// accept, a reaped entry. It takes the per-peer snapshots (peer_snapshot.h)
// that `status.peers` and the metrics are rendered from, and adds the
// node-wide peer families to a scrape (docs/operations.md lists them).
//
// Thread-safety: none; used on the daemon's one event loop.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "daemon/metrics/counters.h"
#include "daemon/metrics/metrics.h"
#include "daemon/peer/peer_connection.h"
#include "daemon/node/peer_snapshot.h"
#include "daemon/metrics/reason_labels.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

// Why an inbound peer connection was refused before its handshake.
enum class ConnectionRefusal { kAllowCidr, kUnavailable, kMaxHandshaking, kMaxHandshakingPerSource };
inline constexpr std::array<std::string_view, 4> kConnectionRefusalLabels = {
    "allow_cidr", "unavailable", "max_handshaking", "max_handshaking_per_source"};

class PeerMetrics {
 public:
  PeerMetrics();

  // Where authentication and checksum failures are counted (the node's
  // status.counters); null = not counted. Must outlive this object.
  void set_counters(Counters* counters) { counters_ = counters; }

  // A peer entry's state and counts, with its live connection's (if any).
  PeerSnapshot Snapshot(const std::string& peer_id, PeerState state, std::chrono::system_clock::time_point since,
                        const std::optional<std::string>& last_error, const PeerCounters& counters,
                        const PeerConnection* connection) const;

  // Counts and logs (one line) the end of any connection.
  void RecordClose(const PeerConnection& connection);
  void CountAuthFailure(const PeerConnection& connection);
  // A load of `bytes` was sent as node job `job_id`.
  void RecordLoadStart(session::JobId job_id, uint64_t bytes);
  // `counters` is the peer entry's, null when it is gone.
  void RecordLoadResult(PeerCounters* counters, const std::string& peer, const session::JobResult& result);
  void RecordChecksumFailure(const std::string& peer, const session::ChecksumFailure& failure);
  void RecordLookupRoundTrip(session::Duration round_trip);
  void CountRefused(ConnectionRefusal refusal) { ++refused_[static_cast<size_t>(refusal)]; }
  // Returns the failed accepts so far, this one included.
  uint64_t CountAcceptFailure() { return ++accept_failures_; }
  void CountReaped() { ++peers_reaped_; }

  // The node-wide peer families; `handshaking` and `unbound_store_jobs` are
  // the manager's gauges of the moment.
  void CollectMetrics(metrics::Registry& registry, size_t handshaking, size_t unbound_store_jobs) const;

 private:
  // A load sent and not yet ended, for its latency and transfer size.
  struct LoadStart {
    std::chrono::steady_clock::time_point at;
    uint64_t bytes = 0;
  };

  Counters* counters_ = nullptr;
  std::array<uint64_t, kHandshakeFailureLabels.size()> handshake_failures_{};
  std::array<uint64_t, kSessionCloseLabels.size()> sessions_closed_{};
  std::map<std::string, uint64_t> violations_;  // by label; rare and few
  std::array<uint64_t, kConnectionRefusalLabels.size()> refused_{};
  uint64_t accept_failures_ = 0;
  uint64_t peers_reaped_ = 0;
  std::unordered_map<session::JobId, LoadStart> load_starts_;
  metrics::Histogram lookup_round_trip_;
  metrics::Histogram load_seconds_succeeded_;
  metrics::Histogram load_seconds_failed_;
  metrics::Histogram load_bytes_;
};

}  // namespace kvpeer::daemon
