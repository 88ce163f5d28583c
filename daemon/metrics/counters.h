// Counters: the node's monotonically increasing counts, reported by
// `status` (counters) and `metrics`.
//
// Every counter is declared here, up front, so each exists at 0 from the
// start (a first failure is then a rise an alert can see): the plain ones in
// kCounterSpecs (status name N, metric kvpeer_N_total), the labelled ones in
// kCounterFamilies (status names <status_prefix><label value>, one metric
// family with one label). The metric a counter belongs to comes from these
// tables, never from parsing its name.
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvpeer::daemon {

enum class Counter : size_t {
  kRequests,
  kRequestsFailed,
  kControlConnections,
  kControlConnectionsRefused,
  kControlRequestsRefusedPolicy,
  kEnginesAdmitted,
  kLoadsSubmitted,
  kStoresSubmitted,
  kLoadResultsSucceeded,
  kLoadResultsFailed,
  kStoreResultsSucceeded,
  kStoreResultsFailed,
  kResultsDropped,
  kConfigReloads,
  kConfigReloadFailures,
  kAuthFailures,
  kAuthRejectedByPeer,
  kChecksumFailures,
  kPeerConnectionsRefusedAllowCidr,
  kRoundsExpiredLookup,
  kRoundsExpiredUnsupplied,
  kLimitMaxControlConnections,
  kLimitMaxEngines,
  kLimitMaxRegionBytes,
  kLimitMaxPeers,
  kLimitMaxHandshaking,
  kLimitMaxHandshakingPerSource,
  kLimitMaxPendingLookups,
  kLimitMaxQueuedBytes,
  kLimitMaxRoundsPerPeer,
  kLimitMaxRoundKeyBytes,
  kSealBytesHashed,
  kSealsBroken,
  kLimitMaxSealBytes,
  kLimitMaxKeysPerSlot,
  kLimitMaxPublishedKeyBytes,
  kLimitMaxOpenRequestBytes,
};

struct CounterSpec {
  Counter id;
  std::string_view name;   // in status.counters; the metric is kvpeer_<name>_total
  std::string_view limit;  // the flag of a limit_ counter ("max-peers"), else empty
};

// In the order of Counter.
inline constexpr std::array<CounterSpec, 37> kCounterSpecs = {{
    {Counter::kRequests, "requests", ""},
    {Counter::kRequestsFailed, "requests_failed", ""},
    {Counter::kControlConnections, "control_connections", ""},
    {Counter::kControlConnectionsRefused, "control_connections_refused", ""},
    {Counter::kControlRequestsRefusedPolicy, "control_requests_refused_policy", ""},
    {Counter::kEnginesAdmitted, "engines_admitted", ""},
    {Counter::kLoadsSubmitted, "loads_submitted", ""},
    {Counter::kStoresSubmitted, "stores_submitted", ""},
    {Counter::kLoadResultsSucceeded, "load_results_succeeded", ""},
    {Counter::kLoadResultsFailed, "load_results_failed", ""},
    {Counter::kStoreResultsSucceeded, "store_results_succeeded", ""},
    {Counter::kStoreResultsFailed, "store_results_failed", ""},
    {Counter::kResultsDropped, "results_dropped", ""},
    {Counter::kConfigReloads, "config_reloads", ""},
    {Counter::kConfigReloadFailures, "config_reload_failures", ""},
    {Counter::kAuthFailures, "auth_failures", ""},
    {Counter::kAuthRejectedByPeer, "auth_rejected_by_peer", ""},
    {Counter::kChecksumFailures, "checksum_failures", ""},
    {Counter::kPeerConnectionsRefusedAllowCidr, "peer_connections_refused_allow_cidr", ""},
    {Counter::kRoundsExpiredLookup, "rounds_expired_lookup", ""},
    {Counter::kRoundsExpiredUnsupplied, "rounds_expired_unsupplied", ""},
    {Counter::kLimitMaxControlConnections, "limit_max_control_connections", "max-control-connections"},
    {Counter::kLimitMaxEngines, "limit_max_engines", "max-engines"},
    {Counter::kLimitMaxRegionBytes, "limit_max_region_bytes", "max-region-bytes"},
    {Counter::kLimitMaxPeers, "limit_max_peers", "max-peers"},
    {Counter::kLimitMaxHandshaking, "limit_max_handshaking", "max-handshaking"},
    {Counter::kLimitMaxHandshakingPerSource, "limit_max_handshaking_per_source", "max-handshaking-per-source"},
    {Counter::kLimitMaxPendingLookups, "limit_max_pending_lookups", "max-pending-lookups"},
    {Counter::kLimitMaxQueuedBytes, "limit_max_queued_bytes", "max-queued-bytes"},
    {Counter::kLimitMaxRoundsPerPeer, "limit_max_rounds_per_peer", "max-rounds-per-peer"},
    {Counter::kLimitMaxRoundKeyBytes, "limit_max_round_key_bytes", "max-round-key-bytes"},
    {Counter::kSealBytesHashed, "seal_bytes_hashed", ""},
    {Counter::kSealsBroken, "seals_broken", ""},
    {Counter::kLimitMaxSealBytes, "limit_max_seal_bytes", "max-seal-bytes"},
    {Counter::kLimitMaxKeysPerSlot, "limit_max_keys_per_slot", "max-keys-per-slot"},
    {Counter::kLimitMaxPublishedKeyBytes, "limit_max_published_key_bytes", "max-published-key-bytes"},
    {Counter::kLimitMaxOpenRequestBytes, "limit_max_open_request_bytes", "max-open-request-bytes"},
}};

constexpr bool CounterSpecsInOrder() {
  for (size_t i = 0; i < kCounterSpecs.size(); ++i) {
    if (static_cast<size_t>(kCounterSpecs[i].id) != i) return false;
  }
  return true;
}
static_assert(CounterSpecsInOrder(), "kCounterSpecs lists every Counter, in order");

inline std::string_view CounterName(Counter counter) { return kCounterSpecs[static_cast<size_t>(counter)].name; }
// The limit_ counter of a limit's flag ("max-queued-bytes"). A flag that
// is no limit is a programming error: throws std::logic_error.
Counter LimitCounter(std::string_view flag);

enum class CounterFamily : size_t { kControlRequests, kControlErrors, kStoreFailures };

struct CounterFamilySpec {
  CounterFamily id;
  std::string_view status_prefix;  // status.counters name: prefix + label value
  std::string_view metric;
  std::string_view label;
  std::string_view help;
};

// In the order of CounterFamily.
inline constexpr std::array<CounterFamilySpec, 3> kCounterFamilies = {{
    {CounterFamily::kControlRequests, "op_", "kvpeer_control_requests_total", "op",
     "Control requests by op (unknown: an op not in the API)."},
    {CounterFamily::kControlErrors, "errors_", "kvpeer_control_errors_total", "code",
     "Control requests answered with an error, by code."},
    {CounterFamily::kStoreFailures, "store_failures_", "kvpeer_store_failures_total", "reason",
     "Store jobs that failed, by reason."},
}};

static_assert(static_cast<size_t>(kCounterFamilies[1].id) == 1 && static_cast<size_t>(kCounterFamilies[2].id) == 2,
              "kCounterFamilies lists every CounterFamily, in order");

// A family's label values, in label index order: every control op then
// "unknown" (ControlOps()), every error code (kApiErrorCodes), every store
// failure label (kStoreFailureLabels).
const std::vector<std::string_view>& CounterLabels(CounterFamily family);
// The label index of control requests for `op_name`: its op, or unknown.
size_t ControlRequestLabel(std::string_view op_name);

class Counters {
 public:
  Counters();

  void Add(Counter counter, uint64_t n = 1) { plain_[static_cast<size_t>(counter)] += n; }
  // REQUIRES: label < CounterLabels(family).size().
  void Add(CounterFamily family, size_t label, uint64_t n = 1) {
    labelled_[static_cast<size_t>(family)].at(label) += n;
  }
  uint64_t Get(Counter counter) const { return plain_[static_cast<size_t>(counter)]; }
  uint64_t Get(CounterFamily family, size_t label) const { return labelled_[static_cast<size_t>(family)].at(label); }

  // Every counter under its status.counters name, sorted by name.
  std::map<std::string, uint64_t> ByName() const;

 private:
  std::array<uint64_t, kCounterSpecs.size()> plain_{};
  std::array<std::vector<uint64_t>, kCounterFamilies.size()> labelled_;
};

}  // namespace kvpeer::daemon
