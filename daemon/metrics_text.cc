#include "daemon/metrics_text.h"

#include <map>
#include <string_view>

#include <boost/json/value.hpp>
#include <fmt/format.h>

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

constexpr std::string_view kErrorPrefix = "errors_";
constexpr const char* kPeerStates[] = {"connecting", "handshaking", "ready", "backoff", "closed"};

void Family(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void Sample(std::string* out, std::string_view name, std::string_view labels, uint64_t value) {
  fmt::format_to(std::back_inserter(*out), "{}{} {}\n", name, labels, value);
}

// A label value with \, " and newline escaped as the format requires.
std::string Label(std::string_view key, std::string_view value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') escaped.push_back('\\');
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped.push_back(c);
  }
  return fmt::format("{{{}=\"{}\"}}", key, escaped);
}

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

void PeerMetrics(std::string* out, const json::array& peers) {
  std::map<std::string_view, uint64_t> by_state;
  for (const char* state : kPeerStates) by_state[state] = 0;
  for (const json::value& peer : peers) {
    if (peer.is_object()) ++by_state[Str(peer.get_object(), "state")];
  }
  Family(out, "kvpeer_peers", "gauge", "Peer sessions by state.");
  for (const auto& [state, count] : by_state) Sample(out, "kvpeer_peers", Label("state", state), count);

  struct PerPeer {
    const char* field;
    const char* name;
    const char* type;
    const char* help;
  };
  static constexpr PerPeer kPerPeer[] = {
      {"bytes_sent", "kvpeer_peer_bytes_sent_total", "counter", "Bytes sent to the peer."},
      {"bytes_received", "kvpeer_peer_bytes_received_total", "counter", "Bytes received from the peer."},
      {"loads_in_flight", "kvpeer_peer_loads_in_flight", "gauge", "Loads from the peer still owed a result."},
      {"rounds_serving", "kvpeer_peer_rounds_serving", "gauge", "Fetch rounds being served to the peer."},
  };
  for (const PerPeer& metric : kPerPeer) {
    Family(out, metric.name, metric.type, metric.help);
    for (const json::value& peer : peers) {
      if (!peer.is_object()) continue;
      const json::object& object = peer.get_object();
      Sample(out, metric.name, Label("peer", Str(object, "peer_id")), Uint(object, metric.field));
    }
  }
}

}  // namespace

std::string FormatMetrics(const MetricsInput& input) {
  std::string out;
  Family(&out, "kvpeer_up", "gauge", "1 while the daemon runs.");
  Sample(&out, "kvpeer_up", "", 1);
  Family(&out, "kvpeer_uptime_seconds", "gauge", "Seconds since the control socket opened.");
  Sample(&out, "kvpeer_uptime_seconds", "", static_cast<uint64_t>(input.uptime_s));
  Family(&out, "kvpeer_engines", "gauge", "Engine sessions connected.");
  Sample(&out, "kvpeer_engines", "", input.engines);
  Family(&out, "kvpeer_control_connections_open", "gauge", "Open control socket connections.");
  Sample(&out, "kvpeer_control_connections_open", "", input.control_connections);
  PeerMetrics(&out, input.peers);
  if (input.counters == nullptr) return out;

  Family(&out, "kvpeer_control_errors_total", "counter", "Control requests answered with an error, by code.");
  for (const auto& [name, value] : input.counters->values()) {
    if (name.starts_with(kErrorPrefix)) {
      Sample(&out, "kvpeer_control_errors_total", Label("code", std::string_view(name).substr(kErrorPrefix.size())),
             value);
    }
  }
  for (const auto& [name, value] : input.counters->values()) {
    if (name.starts_with(kErrorPrefix)) continue;
    const std::string metric = MetricName(name);
    Family(&out, metric, "counter", "Control-side count of " + name + ".");
    Sample(&out, metric, "", value);
  }
  return out;
}

}  // namespace kvpeer::daemon
