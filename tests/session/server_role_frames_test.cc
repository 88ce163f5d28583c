// ServerRole against the server-side edge cases E47-E51 and E56-E60 of
// docs/edge-cases.md (data frames and the ready list, roles sharing an
// index, round identity, races for a round's end, close); see
// server_role_test.cc for the cases not applicable to our design.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tests/session/server_edge_fixture.h"
#include "tests/session/server_harness.h"

namespace kvpeer::session::testing::server_test {
namespace {

using protocol::AbortAck;
using protocol::BlockData;
using protocol::LookupResp;
using protocol::TransferDone;

TEST_CASE("E47 analogue: the connection fails with a data frame unwritten", "[server]") {
  ServerHarness h(OneBlockFrames());
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Store(1, "a", {1, 2});
  REQUIRE(h.role->ProduceDataFrame());
  const auto results = h.role->Close("connection reset");
  REQUIRE(results.size() == 1);
  REQUIRE_FALSE(results[0].success);
  REQUIRE(results[0].reason == "connection reset");
  REQUIRE(h.log.Count<TransferDone>() == 0);
  REQUIRE(h.region->live_pins(1) == 1);  // the unwritten frame still reads it
  h.log.Clear();                         // the writer drops the frame
  REQUIRE(h.region->total_live_pins() == 0);
  REQUIRE_FALSE(h.role->HasDataToSend());
  REQUIRE_FALSE(h.role->ProduceDataFrame());
}

TEST_CASE("E48 analogue: a round ended mid-transfer fails its jobs once, after their other rounds", "[server]") {
  ServerHarness h(OneBlockFrames());
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  REQUIRE(h.Fetch("a", {3}, {2}, 1).ok());
  h.Store(1, "a", {1, 3});  // serves both rounds
  h.Store(2, "a", {2});
  h.Abort("a", 0);  // the consumer gives up on round 0 before anything is sent
  auto results = h.Results();
  REQUIRE(results.size() == 1);  // job 2 at once; job 1 still has a block queued in round 1
  REQUIRE(results[0].job_id == 2);
  REQUIRE_FALSE(results[0].success);
  REQUIRE(h.region->live_pins(1) == 0);
  REQUIRE(h.region->live_pins(2) == 0);
  REQUIRE(h.region->live_pins(3) == 1);
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"abort_ack", "block_data", "transfer_done"});
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 1));
  REQUIRE(h.Received("a", 1).at(2) == h.BlockBytes(3));
  results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 1);
  REQUIRE_FALSE(results[0].success);  // its round-0 block never went out
  REQUIRE(results[0].reason == "kv_request_id a round 0 aborted by the peer");
  RequireIdle(h);
}

TEST_CASE("E49 analogue: a pull with nothing queued sends nothing", "[server]") {
  ServerHarness h;
  REQUIRE_FALSE(h.role->HasDataToSend());
  REQUIRE_FALSE(h.role->ProduceDataFrame());
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());  // demand without supply
  REQUIRE_FALSE(h.role->ProduceDataFrame());
  REQUIRE(h.log.frames.empty());
  h.Abort("a", 0);
  RequireIdle(h);
}

TEST_CASE("E50 analogue: the ready list stays exact across many requests", "[server]") {
  ServerHarness h(OneBlockFrames());
  h.Publish({1, 2, 3});
  constexpr int kRequests = 20;
  for (int i = 0; i < kRequests; ++i) {
    const std::string kv = "r" + std::to_string(i);
    if (i % 2 == 0) {
      h.Lookup(kv, {1, 2, 3}, 100 + i);
      REQUIRE(h.Fetch(kv, {1, 2, 3}, {0, 1, 2}, 100 + i).ok());
    } else {
      REQUIRE(h.Fetch(kv, {1, 2, 3}, {0, 1, 2}, 100 + i).ok());
      h.Store(i, kv, {1, 2, 3});
    }
  }
  REQUIRE(h.role->RoundsServing() == kRequests);
  h.log.Clear();
  h.Drain();
  const auto data = h.All<BlockData>();
  REQUIRE(data.size() == 3 * kRequests);
  std::set<std::string> first_turn;
  for (int i = 0; i < kRequests; ++i) first_turn.insert(data[i].kv_request_id);
  REQUIRE(first_turn.size() == kRequests);  // every round got a turn before any got a second
  const auto dones = h.All<TransferDone>();
  REQUIRE(dones.size() == kRequests);
  REQUIRE(std::all_of(dones.begin(), dones.end(), [](const TransferDone& d) { return d.success; }));
  REQUIRE(h.Results().size() == kRequests / 2);
  RequireIdle(h);
}

TEST_CASE("E51 analogue: two peers' roles sharing one index stay independent", "[server]") {
  ServerHarness h;
  FrameLog other_log;
  ServerRole other("peer:2", DefaultServerConfig(), h.clock.AsClock(), other_log.AsSend(), h.index);
  h.Publish({1});
  h.Lookup("a", {1}, 0);
  other.OnLookup(protocol::Lookup{"a", Keys({1}), 0});
  REQUIRE(h.region->live_pins(1) == 2);
  REQUIRE(h.TerminalFetch("a", 0).ok());
  REQUIRE(h.region->live_pins(1) == 1);
  REQUIRE(other.OnFetch(protocol::Fetch{"a", Keys({1}), {3}, 0}).ok());
  while (other.HasDataToSend()) other.ProduceDataFrame();
  REQUIRE(other_log.Count<TransferDone>() == 1);
  REQUIRE(h.log.Count<TransferDone>() == 0);
  other_log.Clear();
  REQUIRE(other.TrackedRequests() == 0);
  RequireIdle(h);
}

TEST_CASE("E56 an old round's abort never touches a new round of the same request", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Abort("a", 0);
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());  // a late fetch of the acked round: not reopened
  REQUIRE(h.role->TrackedRequests() == 0);
  h.Abort("a", 0);                          // a re-sent abort: no second ack
  REQUIRE(h.Fetch("a", {1}, {0}, 1).ok());  // the next round has its own token
  h.Store(1, "a", {1});
  h.Drain();
  REQUIRE(h.log.Count<AbortAck>() == 1);
  REQUIRE(h.log.Count<TransferDone>() == 1);
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 1));
  RequireIdle(h);
}

TEST_CASE("E57 a round ends exactly once whatever triggers race for it", "[server]") {
  ServerHarness h(OneBlockFrames());
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Store(1, "a", {1});
  h.role->Finish("a");  // still sending: deferred
  h.role->Finish("a");
  REQUIRE(h.Pull());  // last queued block out: the finishing round ends here
  h.role->Finish("a");
  h.clock.Advance(std::chrono::seconds(120));
  h.role->OnTick();
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "transfer_done"});
  REQUIRE(Done(h.All<TransferDone>()[0], "a", false, 0));
  REQUIRE(h.Results().size() == 1);
  RequireIdle(h);
}

TEST_CASE("E58 results decided before close are returned by close", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Store(1, "a", {1});
  h.Store(2, "b", {2});
  REQUIRE(h.role->ProduceDataFrame());  // job 1 succeeded, held until the frame is written
  REQUIRE(h.Results().empty());
  h.WriteFrames();
  auto results = h.role->Close("shutdown");
  REQUIRE(results.size() == 2);
  std::sort(results.begin(), results.end(), [](const JobResult& x, const JobResult& y) { return x.job_id < y.job_id; });
  REQUIRE(results[0].success);
  REQUIRE_FALSE(results[1].success);
  REQUIRE(h.Results().empty());
  REQUIRE(h.region->total_live_pins() == 0);
}

TEST_CASE("E59 disaggregated supply binds to the round that demands it, not round 0", "[server]") {
  ServerHarness h;
  size_t jobs = 2;
  SECTION("one job serving two open rounds") {
    REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
    REQUIRE(h.Fetch("a", {3, 4}, {2, 3}, 5).ok());
    h.Store(1, "a", {4, 1, 3, 2});
    jobs = 1;
  }
  SECTION("one fetch after another") {
    REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
    h.Store(1, "a", {1, 2});
    h.Drain();
    h.Store(2, "a", {3, 4});  // round 0 is over: waits for the next fetch
    REQUIRE(h.Fetch("a", {3, 4}, {2, 3}, 5).ok());
  }
  SECTION("two rounds open at once") {
    REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
    REQUIRE(h.Fetch("a", {3, 4}, {2, 3}, 5).ok());
    h.Store(2, "a", {3, 4});
    h.Store(1, "a", {1, 2});
  }
  SECTION("supply for both parked before either fetch") {
    h.Store(1, "a", {1, 2});
    h.Store(2, "a", {3, 4});
    REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
    REQUIRE(h.Fetch("a", {3, 4}, {2, 3}, 5).ok());
  }
  h.Drain();
  const auto dones = h.All<TransferDone>();
  REQUIRE(dones.size() == 2);
  REQUIRE(std::all_of(dones.begin(), dones.end(), [](const TransferDone& d) { return d.success; }));
  REQUIRE(h.Received("a", 5).at(3) == h.BlockBytes(4));
  const auto results = h.Results();
  REQUIRE(results.size() == jobs);
  REQUIRE(std::all_of(results.begin(), results.end(), [](const JobResult& r) { return r.success; }));
  RequireIdle(h);
}

TEST_CASE("E60 terminal empty fetch while an earlier round is sending keeps that round's pins", "[server]") {
  ServerHarness h(OneBlockFrames());
  h.Publish({1, 2, 3, 4});
  h.Lookup("a", {1, 2, 3}, 0);
  REQUIRE(h.Fetch("a", {1, 2, 3}, {0, 1, 2}, 0).ok());
  REQUIRE(h.Pull());
  h.Lookup("a", {4}, 1);
  REQUIRE(h.TerminalFetch("a", 1).ok());
  REQUIRE(h.region->live_pins(4) == 0);
  REQUIRE(h.region->live_pins(2) == 1);
  REQUIRE(h.region->live_pins(3) == 1);
  h.Drain();
  REQUIRE(h.log.Count<BlockData>() == 3);
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
  REQUIRE(h.Received("a", 0).at(2) == h.BlockBytes(3));
  RequireIdle(h);
}

}  // namespace
}  // namespace kvpeer::session::testing::server_test
