// status.peers rendered from PeerSnapshot values (daemon/control/peer_status_json.h):
// the fields of control-api.md `status`, in that order, then ours.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "daemon/control/peer_status_json.h"

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

std::vector<std::string> Keys(const json::object& object) {
  std::vector<std::string> keys;
  for (const auto& field : object) keys.emplace_back(field.key());
  return keys;
}

TEST_CASE("a peer's status has the documented fields in order; rtt and last_error are null until known") {
  PeerSnapshot peer;
  peer.peer_id = "node-b:5710";
  peer.state = PeerState::kBackoff;
  peer.since = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  const json::array peers = PeersStatusJson({peer});
  REQUIRE(peers.size() == 1);
  const json::object& status = peers[0].as_object();
  CHECK(Keys(status) == std::vector<std::string>{"peer_id", "state", "since", "rtt_us", "bytes_sent", "bytes_received",
                                                 "loads_in_flight", "rounds_serving", "rounds_open", "round_key_bytes",
                                                 "queued_bytes", "queued_bytes_peak", "features", "last_error"});
  CHECK(status.at("state") == "backoff");
  CHECK(status.at("since") == "2023-11-14T22:13:20Z");
  CHECK(status.at("rtt_us").is_null());
  CHECK(status.at("last_error").is_null());
  CHECK(status.at("features").as_array().empty());
  CHECK(status.at("bytes_sent").to_number<uint64_t>() == 0);
}

TEST_CASE("a peer's status carries its snapshot's values") {
  PeerSnapshot peer;
  peer.peer_id = "node-c:5710";
  peer.state = PeerState::kReady;
  peer.rtt = std::chrono::microseconds(250);
  peer.counters.bytes_sent = 10;
  peer.counters.bytes_received = 20;
  peer.loads_in_flight = 2;
  peer.rounds_serving = 1;
  peer.queued_bytes_peak = 4096;
  peer.features = {"xxh3"};
  peer.last_error = "connection lost";
  const json::object status = PeersStatusJson({peer})[0].as_object();
  CHECK(status.at("state") == "ready");
  CHECK(status.at("rtt_us").to_number<int64_t>() == 250);
  CHECK(status.at("bytes_sent").to_number<uint64_t>() == 10);
  CHECK(status.at("bytes_received").to_number<uint64_t>() == 20);
  CHECK(status.at("loads_in_flight").to_number<uint64_t>() == 2);
  CHECK(status.at("rounds_serving").to_number<uint64_t>() == 1);
  CHECK(status.at("queued_bytes_peak").to_number<uint64_t>() == 4096);
  CHECK(status.at("features") == json::array{"xxh3"});
  CHECK(status.at("last_error") == "connection lost");
}

TEST_CASE("every peer state has its documented name") {
  CHECK(PeerStateName(PeerState::kConnecting) == "connecting");
  CHECK(PeerStateName(PeerState::kHandshaking) == "handshaking");
  CHECK(PeerStateName(PeerState::kReady) == "ready");
  CHECK(PeerStateName(PeerState::kBackoff) == "backoff");
  CHECK(PeerStateName(PeerState::kClosed) == "closed");
}

}  // namespace
}  // namespace kvpeer::daemon
