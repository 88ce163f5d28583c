// PeerSnapshot: what the peer side knows about one peer at one moment,
// as plain values. PeerService::PeersSnapshot() takes one per peer entry;
// `status.peers` (peer_status_json.h) and the per-peer metrics
// (metrics_text.h) are both rendered from it, so neither parses the other.
//
// Thread-safety: a value; taken and read on the daemon's event loop.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/node/connection_stats.h"
#include "daemon/node/peer_state.h"
#include "daemon/metrics/reason_labels.h"

namespace kvpeer::daemon {

// What a peer entry has counted over all its connections, closed ones
// included.
struct PeerCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  ConnectionStats stats;
  uint64_t dials = 0;
  uint64_t sessions_ready = 0;  // sessions that completed the handshake
  uint64_t loads_succeeded = 0;
  std::array<uint64_t, kLoadFailureLabels.size()> loads_failed{};  // by LoadFailureLabel
  uint64_t loads_rejected = 0;                                     // refused at once: peer unavailable
};

struct PeerSnapshot {
  std::string peer_id;
  PeerState state = PeerState::kClosed;
  std::chrono::system_clock::time_point since;
  std::optional<std::chrono::steady_clock::duration> rtt;  // last ping round trip, once measured
  // Totals over the entry's life.
  PeerCounters counters;
  // Of the current connection (0 or empty without one).
  uint64_t loads_in_flight = 0;
  uint64_t rounds_serving = 0;
  uint64_t rounds_open = 0;
  uint64_t round_key_bytes = 0;
  uint64_t queued_bytes = 0;
  uint64_t queued_bytes_peak = 0;
  uint64_t write_queue_frames = 0;
  std::vector<std::string> features;  // wire features on, empty until ready
  std::optional<std::string> last_error;
};

}  // namespace kvpeer::daemon
