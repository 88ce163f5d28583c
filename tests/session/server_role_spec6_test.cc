// ServerRole against the server rules of wire-protocol.md section 6.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "protocol/limits.h"
#include "tests/session/server_harness.h"

namespace kvpeer::session::testing::server_test {
namespace {

using protocol::AbortAck;
using protocol::BlockData;
using protocol::LookupResp;
using protocol::TransferDone;

void RequireIdle(ServerHarness& h) {
  h.WriteFrames();
  REQUIRE(h.role->TrackedRequests() == 0);
  REQUIRE(h.region->total_live_pins() == 0);
}

ServerConfig FramePayload(uint64_t bytes) {
  ServerConfig config = DefaultServerConfig();
  config.max_frame_payload = bytes;
  return config;
}

TEST_CASE("spec6 producer push: block_data for every block, then transfer_done", "[server]") {
  ServerHarness h(FramePayload(2 * kServerBlockLen));
  h.Publish({1, 2, 3, 4, 5});
  h.Lookup("a", {1, 2, 3, 4, 5}, 0);
  REQUIRE(h.Fetch("a", {1, 2, 3, 4, 5}, {4, 3, 2, 1, 0}, 0).ok());
  h.log.Clear();
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "block_data", "block_data", "transfer_done"});
  std::vector<protocol::SlotIndex> sent;
  for (const BlockData& data : h.All<BlockData>()) {
    REQUIRE(data.kv_request_id == "a");
    REQUIRE(data.round_seq == 0);
    sent.insert(sent.end(), data.block_indexes.begin(), data.block_indexes.end());
  }
  REQUIRE(sent == std::vector<protocol::SlotIndex>{4, 3, 2, 1, 0});  // each exactly once, in demand order
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 0));
  REQUIRE_FALSE(h.role->HasDataToSend());
  RequireIdle(h);
}

TEST_CASE("spec6 frames are chunked within max_frame_payload, at least one block each", "[server]") {
  uint64_t limit = 0;
  size_t expected_per_frame = 0;
  SECTION("three blocks a frame") {
    limit = 3 * kServerBlockLen + kServerBlockLen / 2;
    expected_per_frame = 3;
  }
  SECTION("limit below one block still sends one") {
    limit = kServerBlockLen / 2;
    expected_per_frame = 1;
  }
  SECTION("limit above the wire maximum is capped") {
    limit = 2 * protocol::kMaxPayloadLen;
    expected_per_frame = 10;
  }
  ServerHarness h(FramePayload(limit));
  REQUIRE(h.Fetch("a", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0).ok());
  h.Store(1, "a", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  h.Drain();
  const auto data = h.All<BlockData>();
  size_t total = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const size_t count = data[i].block_indexes.size();
    REQUIRE(count >= 1);
    REQUIRE(count * kServerBlockLen <= std::max<uint64_t>(limit, kServerBlockLen));
    REQUIRE(count * kServerBlockLen <= protocol::kMaxPayloadLen);
    if (i + 1 < data.size()) REQUIRE(count == expected_per_frame);
    total += count;
  }
  REQUIRE(total == 10);
  RequireIdle(h);
}

TEST_CASE("spec6 a frame never names more than 65536 block indexes", "[server]") {
  ServerConfig config = DefaultServerConfig();
  config.block_len = 1;  // tiny blocks: the byte limit alone would allow millions
  ServerHarness h(config);
  const size_t blocks = protocol::kMaxListItems + 5;
  std::vector<protocol::Key> keys;
  std::vector<protocol::SlotIndex> dests;
  std::vector<PinRef> pins;
  for (size_t i = 0; i < blocks; ++i) {
    keys.push_back("k" + std::to_string(i));
    dests.push_back(static_cast<protocol::SlotIndex>(i));
    pins.push_back(h.region->Pin(static_cast<uint32_t>(i % kServerBlocks)));
  }
  REQUIRE(h.role->OnFetch(protocol::Fetch{"a", keys, dests, 0}).ok());
  h.role->AddSupply(1, "a", keys, std::move(pins));
  while (h.role->HasDataToSend()) {
    h.role->ProduceDataFrame();
    for (OutFrame& frame : h.log.frames) frame.blocks.clear();
  }
  const auto data = h.All<BlockData>();
  REQUIRE(data.size() == 2);
  REQUIRE(data[0].block_indexes.size() == protocol::kMaxListItems);
  REQUIRE(data[1].block_indexes.size() == 5);
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
  RequireIdle(h);
}

TEST_CASE("spec6 block_data payload bytes equal the source blocks, in index order", "[server]") {
  ServerHarness h;
  h.Publish({3, 9});
  h.Lookup("a", {9, 3}, 2);
  REQUIRE(h.Fetch("a", {9, 3}, {0, 1}, 2).ok());
  REQUIRE(h.role->ProduceDataFrame());
  REQUIRE(h.Types() == std::vector<std::string>{"lookup_resp", "block_data", "transfer_done"});
  const OutFrame& frame = h.log.frames[1];
  const BlockData& data = std::get<BlockData>(frame.message);
  REQUIRE(data.block_indexes == std::vector<protocol::SlotIndex>{0, 1});
  REQUIRE(frame.blocks.size() == 2);
  const auto first = frame.blocks[0]->bytes();
  const auto second = frame.blocks[1]->bytes();
  REQUIRE(std::vector<uint8_t>(first.begin(), first.end()) == h.BlockBytes(9));
  REQUIRE(std::vector<uint8_t>(second.begin(), second.end()) == h.BlockBytes(3));
  REQUIRE(first.size() == kServerBlockLen);
  h.Drain();
  RequireIdle(h);
}

TEST_CASE("spec6 a pin is released only when no round and no unwritten frame holds it", "[server]") {
  ServerHarness h;
  h.Publish({1});
  h.Lookup("a", {1}, 0);
  REQUIRE(h.region->live_pins(1) == 1);  // pinned from the hit ...
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  REQUIRE(h.role->ProduceDataFrame());
  REQUIRE(h.Types() == std::vector<std::string>{"lookup_resp", "block_data", "transfer_done"});
  OutFrame held = h.log.frames[1];  // the writer's copy, not written yet
  h.log.Clear();
  REQUIRE(h.role->TrackedRequests() == 0);  // ... the round has ended ...
  REQUIRE(h.region->live_pins(1) == 1);     // ... but the frame still reads the slot
  held = OutFrame{};                        // written and dropped
  REQUIRE(h.region->live_pins(1) == 0);
  h.Drain();
  RequireIdle(h);
}

TEST_CASE("spec6 store results wait until the frame reading their slots is written", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Store(1, "a", {1});
  REQUIRE(h.role->ProduceDataFrame());
  REQUIRE(h.Results().empty());      // the engine may reuse the slot once told
  REQUIRE(h.role->HasDataToSend());  // one more pull releases the result
  h.WriteFrames();
  REQUIRE_FALSE(h.role->ProduceDataFrame());
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].success);
  REQUIRE(results[0].kv_request_id == "a");
  REQUIRE_FALSE(h.role->HasDataToSend());
  RequireIdle(h);
}

TEST_CASE("spec6 abort_fetch stops the round's data and is acked once", "[server]") {
  ServerHarness h(FramePayload(kServerBlockLen));
  h.Publish({1, 2, 3});
  h.Lookup("a", {1, 2, 3}, 0);
  REQUIRE(h.Fetch("a", {1, 2, 3}, {0, 1, 2}, 0).ok());
  REQUIRE(h.Pull());
  h.Abort("a", 0);
  h.Abort("a", 0);
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"lookup_resp", "block_data", "abort_ack"});
  const AbortAck ack = h.All<AbortAck>()[0];
  REQUIRE(ack.kv_request_id == "a");
  REQUIRE(ack.round_seq == 0);
  RequireIdle(h);
}

TEST_CASE("spec6 disaggregated supply meets demand in either order", "[server]") {
  ServerHarness h;
  SECTION("store then fetch") {
    h.Store(7, "a", {1, 2});
    REQUIRE(h.Fetch("a", {2, 1}, {0, 1}, 11).ok());
  }
  SECTION("fetch then store") {
    REQUIRE(h.Fetch("a", {2, 1}, {0, 1}, 11).ok());
    h.Store(7, "a", {1, 2});
  }
  REQUIRE(h.role->TakeNewFetchIds() == std::vector<std::string>{"a"});
  REQUIRE(h.role->TakeNewFetchIds().empty());
  h.Drain();
  const auto received = h.Received("a", 11);
  REQUIRE(received.at(0) == h.BlockBytes(2));
  REQUIRE(received.at(1) == h.BlockBytes(1));
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 11));
  REQUIRE(h.Results().at(0).job_id == 7);
  RequireIdle(h);
}

TEST_CASE("spec6 a store no peer fetches fails after the store timeout", "[server]") {
  ServerHarness h;
  h.Store(1, "a", {1, 2});
  REQUIRE(h.region->total_live_pins() == 2);
  h.clock.Advance(std::chrono::seconds(60));
  REQUIRE(h.role->NextDeadline() == h.clock.now());
  h.role->OnTick();
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE_FALSE(results[0].success);
  REQUIRE_FALSE(h.role->NextDeadline().has_value());
  RequireIdle(h);
}

TEST_CASE("spec6 a store taken by a fetch no longer times out: its round ends it", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Store(1, "a", {1, 2});
  REQUIRE_FALSE(h.role->NextDeadline().has_value());
  h.clock.Advance(std::chrono::seconds(300));  // a slow writer is not a dead consumer
  h.role->OnTick();
  REQUIRE(h.Results().empty());
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
  REQUIRE(h.Results().at(0).success);
  RequireIdle(h);
}

TEST_CASE("spec6 lookup_resp echoes the lookup's round_seq; empty lookups get no answer", "[server]") {
  ServerHarness h;
  h.Publish({1});
  h.Lookup("a", {}, 3);
  REQUIRE(h.log.frames.empty());
  REQUIRE(h.role->TrackedRequests() == 0);
  h.Lookup("a", {1}, 0xFFFFFFFFFFFFFFFFull);
  REQUIRE(h.All<LookupResp>().at(0).round_seq == 0xFFFFFFFFFFFFFFFFull);
  REQUIRE(h.TerminalFetch("a", 0xFFFFFFFFFFFFFFFFull).ok());
  RequireIdle(h);
}

TEST_CASE("spec6 every store job ends with exactly one result", "[server]") {
  ServerHarness h;
  h.Store(1, "a", {});                       // nothing to deliver
  h.role->AddSupply(2, "a", Keys({1}), {});  // keys without blocks
  h.Store(3, "a", {1});
  h.Store(3, "a", {2});     // id still in use
  h.Store(4, "a", {1, 1});  // a key twice is one block
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Drain();
  auto results = h.Results();
  std::sort(results.begin(), results.end(), [](const JobResult& x, const JobResult& y) {
    return x.job_id != y.job_id ? x.job_id < y.job_id : x.success > y.success;
  });
  REQUIRE(results.size() == 4);
  REQUIRE(results[0].success);        // job 1
  REQUIRE_FALSE(results[1].success);  // job 2
  REQUIRE(results[2].job_id == 3);
  REQUIRE(results[2].success);        // served round 0
  REQUIRE_FALSE(results[3].success);  // the duplicate id
  REQUIRE(results[3].reason == "store job id 3 is already in use");
  h.clock.Advance(std::chrono::seconds(60));  // job 4 waited: round 0 was met by job 3
  h.role->OnTick();
  results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 4);
  REQUIRE_FALSE(results[0].success);
  RequireIdle(h);
}

TEST_CASE("spec6 rounds take turns: one request cannot starve another", "[server]") {
  ServerHarness h(FramePayload(kServerBlockLen));
  REQUIRE(h.Fetch("big", {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}, 0).ok());
  h.Store(1, "big", {0, 1, 2, 3, 4, 5});
  REQUIRE(h.Pull());
  REQUIRE(h.Fetch("small", {9}, {0}, 1).ok());
  h.Store(2, "small", {9});
  h.Drain();
  const auto data = h.All<BlockData>();
  // The small request's one block goes out within the next two frames.
  REQUIRE((data[1].kv_request_id == "small" || data[2].kv_request_id == "small"));
  REQUIRE(h.log.Count<TransferDone>() == 2);
  RequireIdle(h);
}

}  // namespace
}  // namespace kvpeer::session::testing::server_test
