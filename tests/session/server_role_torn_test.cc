// ServerRole::OnDataFrameTorn: a data frame whose source could not be read
// while it was written (wire spec section 6, "A torn source") fails its
// round and the store jobs with a block in it, each with one result.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/session/server_harness.h"

namespace kvpeer::session::testing::server_test {
namespace {

using protocol::BlockData;
using protocol::TransferDone;

ServerConfig TornOneBlockFrames() {
  ServerConfig config = DefaultServerConfig();
  config.max_frame_payload = kServerBlockLen;
  return config;
}

TEST_CASE("a torn frame in the middle of a round fails the round and its store job", "[server][torn]") {
  ServerHarness h(TornOneBlockFrames());
  REQUIRE(h.Fetch("a", {1, 2, 3}, {0, 1, 2}, 0).ok());
  h.Store(7, "a", {1, 2, 3});
  REQUIRE(h.role->ProduceDataFrame());  // block 1, being written
  h.role->OnDataFrameTorn("a", 0, "torn for the test");
  h.WriteFrames();
  REQUIRE_FALSE(h.Pull());  // nothing more of the failed round
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "transfer_done"});
  REQUIRE_FALSE(h.All<TransferDone>()[0].success);
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  CHECK(results[0].job_id == 7);
  CHECK_FALSE(results[0].success);
  CHECK(results[0].reason == "torn for the test");
  CHECK(h.region->total_live_pins() == 0);
  CHECK(h.role->TrackedRequests() == 0);
}

TEST_CASE("a torn last frame turns the store job's held success into a failure", "[server][torn]") {
  ServerHarness h(TornOneBlockFrames());
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Store(7, "a", {1});
  REQUIRE(h.role->ProduceDataFrame());  // the round's last frame; transfer_done{true} queued behind it
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "transfer_done"});
  REQUIRE(h.All<TransferDone>()[0].success);  // the writer corrects it (PeerConnection)
  h.role->OnDataFrameTorn("a", 0, "torn for the test");
  REQUIRE(h.Types().size() == 2);  // the round had ended: no second terminal
  h.WriteFrames();
  h.Pull();
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  CHECK_FALSE(results[0].success);
  CHECK(results[0].reason == "torn for the test");
  CHECK(h.region->total_live_pins() == 0);
}

TEST_CASE("a torn frame fails a store job whose other blocks wait in another round", "[server][torn]") {
  ServerHarness h(TornOneBlockFrames());
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  REQUIRE(h.Fetch("a", {2}, {1}, 1).ok());
  h.Store(7, "a", {1, 2});
  REQUIRE(h.role->ProduceDataFrame());
  const BlockData first = h.All<BlockData>()[0];
  h.role->OnDataFrameTorn(first.kv_request_id, first.round_seq, "torn for the test");
  h.Drain();
  h.WriteFrames();
  h.Pull();
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  CHECK_FALSE(results[0].success);
  const auto dones = h.All<TransferDone>();
  REQUIRE(dones.size() == 2);  // the other round still completes on the wire
  CHECK(h.region->total_live_pins() == 0);
}

}  // namespace
}  // namespace kvpeer::session::testing::server_test
