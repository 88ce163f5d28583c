#include "daemon/control/peer_status_json.h"

#include <boost/json/object.hpp>

#include "base/rfc3339.h"

namespace kvpeer::daemon {
namespace {

boost::json::object PeerStatusJson(const PeerSnapshot& peer) {
  boost::json::object out;
  out["peer_id"] = peer.peer_id;
  out["state"] = PeerStateName(peer.state);
  out["since"] = FormatRfc3339(peer.since);
  if (peer.rtt) {
    out["rtt_us"] = std::chrono::duration_cast<std::chrono::microseconds>(*peer.rtt).count();
  } else {
    out["rtt_us"] = nullptr;
  }
  out["bytes_sent"] = peer.counters.bytes_sent;
  out["bytes_received"] = peer.counters.bytes_received;
  out["loads_in_flight"] = peer.loads_in_flight;
  out["rounds_serving"] = peer.rounds_serving;
  // Beyond the spec's fields: what the limits watch (max-rounds-per-peer,
  // max-round-key-bytes, max-queued-bytes), for the current connection.
  out["rounds_open"] = peer.rounds_open;
  out["round_key_bytes"] = peer.round_key_bytes;
  out["queued_bytes"] = peer.queued_bytes;
  out["queued_bytes_peak"] = peer.queued_bytes_peak;
  // Ours: the wire features on for the current session (wire-protocol.md,
  // "Features and block checksums"), empty until it is ready.
  boost::json::array features;
  for (const std::string& name : peer.features) features.emplace_back(name);
  out["features"] = std::move(features);
  if (peer.last_error) {
    out["last_error"] = *peer.last_error;
  } else {
    out["last_error"] = nullptr;
  }
  return out;
}

}  // namespace

boost::json::array PeersStatusJson(const std::vector<PeerSnapshot>& peers) {
  boost::json::array out;
  for (const PeerSnapshot& peer : peers) out.push_back(PeerStatusJson(peer));
  return out;
}

}  // namespace kvpeer::daemon
