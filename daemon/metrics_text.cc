#include "daemon/metrics_text.h"

#include <array>
#include <string_view>

#include <boost/json/value.hpp>

#include "config/version.h"
#include "daemon/metrics.h"
#include "daemon/peer_service.h"
#include "daemon/peer_state.h"

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

// Control-side counter names that become one labelled family.
struct LabelledCounter {
  std::string_view prefix;
  const char* family;
  const char* label;
  const char* help;
};
constexpr std::array<LabelledCounter, 3> kLabelledCounters = {{
    {"op_", "kvpeer_control_requests_total", "op", "Control requests by op (unknown: an op not in the API)."},
    {"errors_", "kvpeer_control_errors_total", "code", "Control requests answered with an error, by code."},
    {"store_failures_", "kvpeer_store_failures_total", "reason", "Store jobs that failed, by reason."},
}};

// Counter names are snake_case already; anything else becomes '_'.
std::string MetricName(std::string_view name) {
  std::string out = "kvpeer_";
  for (char c : name) out.push_back((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ? c : '_');
  return out + "_total";
}

uint64_t Uint(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  if (value == nullptr) return 0;
  if (const uint64_t* u = value->if_uint64()) return *u;
  if (const int64_t* i = value->if_int64()) return *i > 0 ? static_cast<uint64_t>(*i) : 0;
  return 0;
}

std::string_view Str(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  return value != nullptr && value->is_string() ? std::string_view(value->get_string()) : std::string_view();
}

void PeerStatusMetrics(metrics::Registry& registry, const json::array& peers) {
  std::array<uint64_t, kPeerStateNames.size()> by_state{};
  for (const json::value& peer : peers) {
    if (!peer.is_object()) continue;
    for (size_t i = 0; i < kPeerStateNames.size(); ++i) {
      if (Str(peer.get_object(), "state") == kPeerStateNames[i]) ++by_state[i];
    }
  }
  auto& states = registry.Gauge("kvpeer_peers", "Peers by session state.", {"state"});
  for (size_t i = 0; i < kPeerStateNames.size(); ++i) states.Set({kPeerStateNames[i]}, static_cast<double>(by_state[i]));

  struct PerPeer {
    const char* field;
    const char* name;
    metrics::Type type;
    const char* help;
  };
  static constexpr PerPeer kPerPeer[] = {
      {"bytes_sent", "kvpeer_peer_bytes_sent_total", metrics::Type::kCounter, "Bytes sent to the peer."},
      {"bytes_received", "kvpeer_peer_bytes_received_total", metrics::Type::kCounter,
       "Bytes received from the peer."},
      {"loads_in_flight", "kvpeer_peer_loads_in_flight", metrics::Type::kGauge,
       "Loads from the peer still owed a result."},
      {"rounds_serving", "kvpeer_peer_rounds_serving", metrics::Type::kGauge,
       "Fetch rounds of the peer being served."},
  };
  for (const PerPeer& metric : kPerPeer) {
    metrics::Family& family = metric.type == metrics::Type::kCounter
                                  ? registry.Counter(metric.name, metric.help, {"peer"})
                                  : registry.Gauge(metric.name, metric.help, {"peer"});
    for (const json::value& peer : peers) {
      if (!peer.is_object()) continue;
      const json::object& object = peer.get_object();
      const uint64_t value = Uint(object, metric.field);
      if (metric.type == metrics::Type::kCounter) {
        family.Add({Str(object, "peer_id")}, value);
      } else {
        family.Set({Str(object, "peer_id")}, static_cast<double>(value));
      }
    }
  }
}

void CounterMetrics(metrics::Registry& registry, const Counters& counters) {
  for (const LabelledCounter& labelled : kLabelledCounters) {
    metrics::Family& family = registry.Counter(labelled.family, labelled.help, {labelled.label});
    for (const auto& [name, value] : counters.values()) {
      if (name.starts_with(labelled.prefix)) family.Add({std::string_view(name).substr(labelled.prefix.size())}, value);
    }
  }
  for (const auto& [name, value] : counters.values()) {
    bool labelled = false;
    for (const LabelledCounter& family : kLabelledCounters) labelled = labelled || name.starts_with(family.prefix);
    if (labelled) continue;
    registry.Counter(MetricName(name), "Control-side count of " + name + ".").Add({}, value);
  }
}

}  // namespace

std::string FormatMetrics(const MetricsInput& input) {
  metrics::Registry registry;
  const auto gauge = [&](const char* name, const char* help, double value) {
    registry.Gauge(name, help).Set({}, value);
  };
  gauge("kvpeer_up", "1 while the daemon runs.", 1);
  registry.Gauge("kvpeer_build_info", "The daemon's version and wire protocol version; always 1.",
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
  PeerStatusMetrics(registry, input.peers);
  if (input.counters != nullptr) CounterMetrics(registry, *input.counters);
  if (input.peer_service != nullptr) input.peer_service->CollectMetrics(registry);
  return registry.Text();
}

}  // namespace kvpeer::daemon
