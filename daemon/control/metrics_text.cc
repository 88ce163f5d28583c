#include "daemon/control/metrics_text.h"

#include <array>
#include <string_view>

#include "config/version.h"
#include "daemon/metrics/metrics.h"
#include "daemon/metrics/peer_histograms.h"
#include "daemon/node/peer_service.h"
#include "daemon/node/peer_state.h"
#include "daemon/metrics/reason_labels.h"
#include "protocol/type_names.h"

namespace kvpeer::daemon {
namespace {

void PeerStateMetrics(metrics::Registry& registry, const std::vector<PeerSnapshot>& peers) {
  std::array<uint64_t, kPeerStateNames.size()> by_state{};
  for (const PeerSnapshot& peer : peers) ++by_state[static_cast<size_t>(peer.state)];
  auto& states = registry.Gauge("kvpeer_peers", "Peers by session state.", {"state"});
  for (size_t i = 0; i < kPeerStateNames.size(); ++i) {
    states.Set({kPeerStateNames[i]}, static_cast<double>(by_state[i]));
  }
}

void PeerTrafficMetrics(metrics::Registry& registry, const std::vector<PeerSnapshot>& peers) {
  auto& bytes_sent = registry.Counter("kvpeer_peer_bytes_sent_total", "Bytes sent to the peer.", {"peer"});
  auto& bytes_received =
      registry.Counter("kvpeer_peer_bytes_received_total", "Bytes received from the peer.", {"peer"});
  auto& frames_sent = registry.Counter("kvpeer_peer_frames_sent_total", "Frames written to the peer, by message type.",
                                       {"peer", "type"});
  auto& frames_received = registry.Counter("kvpeer_peer_frames_received_total",
                                           "Frames received from the peer, by message type.", {"peer", "type"});
  auto& keys_sent = registry.Counter("kvpeer_peer_lookup_keys_sent_total",
                                     "Keys this node probed on the peer (keys of lookup messages sent).", {"peer"});
  auto& hits_received = registry.Counter("kvpeer_peer_lookup_hits_received_total",
                                         "Keys the peer answered hit (in lookup_resp messages received).", {"peer"});
  auto& keys_served =
      registry.Counter("kvpeer_peer_lookup_keys_served_total",
                       "Keys the peer probed on this node (keys of lookup messages received).", {"peer"});
  auto& hits_served = registry.Counter("kvpeer_peer_lookup_hits_served_total",
                                       "Keys of the peer's probes this node answered hit.", {"peer"});
  const auto type_name = [](size_t index) {
    return index < protocol::kKnownTypeNames.size() ? protocol::kKnownTypeNames[index] : std::string_view("unknown");
  };
  for (const PeerSnapshot& peer : peers) {
    const std::string& id = peer.peer_id;
    const ConnectionStats& stats = peer.counters.stats;
    bytes_sent.Add({id}, peer.counters.bytes_sent);
    bytes_received.Add({id}, peer.counters.bytes_received);
    for (size_t i = 0; i < ConnectionStats::kMessageKinds; ++i) {
      if (stats.frames_sent[i] > 0) frames_sent.Add({id, type_name(i)}, stats.frames_sent[i]);
      if (stats.frames_received[i] > 0) frames_received.Add({id, type_name(i)}, stats.frames_received[i]);
    }
    keys_sent.Add({id}, stats.lookup_keys_sent);
    hits_received.Add({id}, stats.lookup_hits_received);
    keys_served.Add({id}, stats.lookup_keys_served);
    hits_served.Add({id}, stats.lookup_hits_served);
  }
}

void PeerWorkMetrics(metrics::Registry& registry, const std::vector<PeerSnapshot>& peers) {
  auto& loads = registry.Counter("kvpeer_peer_loads_total",
                                 "Loads from the peer by outcome (succeeded, failed, rejected) and reason.",
                                 {"peer", "outcome", "reason"});
  auto& dials =
      registry.Counter("kvpeer_peer_dials_total", "Connection attempts this node made to the peer.", {"peer"});
  auto& sessions =
      registry.Counter("kvpeer_peer_sessions_total", "Sessions with the peer that completed the handshake.", {"peer"});
  for (const PeerSnapshot& peer : peers) {
    const std::string& id = peer.peer_id;
    const PeerCounters& counters = peer.counters;
    loads.Add({id, "succeeded", "none"}, counters.loads_succeeded);
    for (size_t i = 0; i < kLoadFailureLabels.size(); ++i) {
      if (counters.loads_failed[i] > 0) loads.Add({id, "failed", kLoadFailureLabels[i]}, counters.loads_failed[i]);
    }
    if (counters.loads_rejected > 0) loads.Add({id, "rejected", "peer_unavailable"}, counters.loads_rejected);
    dials.Add({id}, counters.dials);
    sessions.Add({id}, counters.sessions_ready);
  }
}

void PeerGaugeMetrics(metrics::Registry& registry, const std::vector<PeerSnapshot>& peers) {
  auto& loads_in_flight =
      registry.Gauge("kvpeer_peer_loads_in_flight", "Loads from the peer still owed a result.", {"peer"});
  auto& rounds_serving =
      registry.Gauge("kvpeer_peer_rounds_serving", "Fetch rounds of the peer being served.", {"peer"});
  auto& queue = registry.Gauge("kvpeer_peer_write_queue_frames",
                               "Frames queued on the peer's connection and not yet written.", {"peer"});
  auto& queue_bytes =
      registry.Gauge("kvpeer_peer_write_queue_bytes",
                     "Bytes of the frames queued on the peer's connection (max-queued-bytes applies).", {"peer"});
  auto& rtt = registry.Gauge("kvpeer_peer_rtt_seconds", "Last ping round trip to the peer.", {"peer"});
  for (const PeerSnapshot& peer : peers) {
    const std::string& id = peer.peer_id;
    loads_in_flight.Set({id}, static_cast<double>(peer.loads_in_flight));
    rounds_serving.Set({id}, static_cast<double>(peer.rounds_serving));
    queue.Set({id}, static_cast<double>(peer.write_queue_frames));
    queue_bytes.Set({id}, static_cast<double>(peer.queued_bytes));
    if (peer.rtt) rtt.Set({id}, peer_histograms::Seconds(*peer.rtt));
  }
}

void PeerMetricsText(metrics::Registry& registry, const std::vector<PeerSnapshot>& peers) {
  PeerStateMetrics(registry, peers);
  PeerTrafficMetrics(registry, peers);
  PeerWorkMetrics(registry, peers);
  PeerGaugeMetrics(registry, peers);
}

// Every declared counter, at 0 until counted (counters.h).
void CounterMetrics(metrics::Registry& registry, const Counters& counters) {
  for (const CounterFamilySpec& spec : kCounterFamilies) {
    metrics::Family& family = registry.Counter(spec.metric, spec.help, {std::string(spec.label)});
    const std::vector<std::string_view>& labels = CounterLabels(spec.id);
    for (size_t i = 0; i < labels.size(); ++i) family.Add({labels[i]}, counters.Get(spec.id, i));
  }
  for (const CounterSpec& spec : kCounterSpecs) {
    const std::string name(spec.name);
    registry.Counter("kvpeer_" + name + "_total", "Control-side count of " + name + ".").Add({}, counters.Get(spec.id));
  }
}

}  // namespace

std::string FormatMetrics(const MetricsInput& input) {
  metrics::Registry registry;
  const auto gauge = [&](const char* name, const char* help, double value) {
    registry.Gauge(name, help).Set({}, value);
  };
  gauge("kvpeer_up", "1 while the daemon runs.", 1);
  registry
      .Gauge("kvpeer_build_info", "The daemon's version and wire protocol version; always 1.",
             {"version", "wire_version"})
      .Set({kVersion, kWireVersion}, 1);
  gauge("kvpeer_uptime_seconds", "Seconds since the control socket opened.", static_cast<double>(input.uptime_s));
  gauge("kvpeer_engines", "Engine sessions connected.", static_cast<double>(input.engines));
  gauge("kvpeer_control_connections_open", "Open control socket connections.",
        static_cast<double>(input.control_connections));
  gauge("kvpeer_published_keys", "Keys published by the node's engines.", static_cast<double>(input.published_keys));
  gauge("kvpeer_pins", "Live pins on engine blocks (held by lookup rounds, queued frames and store jobs).",
        static_cast<double>(input.pins));
  gauge("kvpeer_engine_loads_in_flight", "Engines' loads still owed a result.",
        static_cast<double>(input.engine_loads_in_flight));
  gauge("kvpeer_engine_jobs_pending", "Engines' jobs whose result poll has not delivered yet.",
        static_cast<double>(input.engine_jobs_pending));
  PeerMetricsText(registry, input.peers);
  if (input.counters != nullptr) CounterMetrics(registry, *input.counters);
  if (input.peer_service != nullptr) input.peer_service->CollectMetrics(registry);
  return registry.Text();
}

}  // namespace kvpeer::daemon
