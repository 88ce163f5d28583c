// FormatMetrics: the daemon's metrics as Prometheus text (exposition format
// 0.0.4), answered by the `metrics` op and by the --metrics-listen HTTP
// listener. docs/operations.md lists every family.
//
// A fresh metrics::Registry is filled per call:
//   * node: kvpeer_up, kvpeer_build_info, kvpeer_uptime_seconds;
//   * control side: engines, control connections, published keys, pins,
//     engine loads in flight and jobs awaiting poll; every declared
//     Counter (counters.h), each family of kCounterFamilies one labelled
//     family, each plain counter N kvpeer_N_total;
//   * peers from their snapshots: kvpeer_peers{state} and every per-peer
//     family (bytes, frames, lookups, loads, dials, queues, rtt);
//   * the node-wide families of the peer side through
//     PeerService::CollectMetrics.
//
// Thread-safety: none; called on the daemon's event loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/metrics/counters.h"
#include "daemon/node/peer_snapshot.h"

namespace kvpeer::daemon {

class PeerService;

struct MetricsInput {
  int64_t uptime_s = 0;
  size_t engines = 0;
  size_t control_connections = 0;
  size_t published_keys = 0;
  uint64_t pins = 0;
  size_t engine_loads_in_flight = 0;
  size_t engine_jobs_pending = 0;
  std::vector<PeerSnapshot> peers;  // as PeerService::PeerSnapshots()
  const Counters* counters = nullptr;
  const PeerService* peer_service = nullptr;  // adds its own families when set
};

std::string FormatMetrics(const MetricsInput& input);

}  // namespace kvpeer::daemon
