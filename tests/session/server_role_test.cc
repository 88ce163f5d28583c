// ServerRole against the server-side edge cases (E21-E51 and E56-E60 of
// docs/edge-cases.md), one TEST_CASE per case, named by number.
//
// Not applicable to our design, so not tested:
// * E25 (a HIT_PENDING/RETRY probe forced to MISS after 5 s): the node-wide
//   PublishedBlocks answers every key at once, so no lookup is ever parked.
// * E41 (abort drain past 10 s, immediate cancel): nothing of a round is in
//   flight outside the role except the one data frame already produced,
//   which holds its own pins; there is nothing to drain or cancel, so the
//   ack is immediate (E39/E40/E42 cover it).
// Cases whose seed mechanism does not exist here are tested through their
// analogue, named in the test: serve windows and synthetic engine contexts
// (E21, E24, E26-E28) -> immediate answers and round-held pins; NIXL
// write_blocks/transfer states (E47-E49) -> the writer's pull path and the
// connection failing; a transport poll per peer (E51) -> two roles sharing
// one PublishedBlocks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tests/session/server_harness.h"

namespace kvpeer::session::testing::server_test {
namespace {

using protocol::AbortAck;
using protocol::BlockData;
using protocol::LookupResp;
using protocol::TransferDone;

ServerConfig OneBlockFrames() {
  ServerConfig config = DefaultServerConfig();
  config.max_frame_payload = kServerBlockLen;
  return config;
}

// Every request has ended: no state, no pins.
void RequireIdle(ServerHarness& h) {
  h.WriteFrames();
  REQUIRE(h.role->TrackedRequests() == 0);
  REQUIRE(h.role->RoundsServing() == 0);
  REQUIRE(h.region->total_live_pins() == 0);
}

TEST_CASE("E21 analogue: a lookup is answered at once, no serve window", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 7);
  REQUIRE(h.Types() == std::vector<std::string>{"lookup_resp"});
  const LookupResp resp = h.All<LookupResp>().at(0);
  REQUIRE(resp.kv_request_id == "a");
  REQUIRE(resp.round_seq == 7);
  REQUIRE(resp.hits == std::vector<bool>{true, true});
  REQUIRE(h.TerminalFetch("a", 7).ok());
  RequireIdle(h);
}

TEST_CASE("E22 all-hit lookup pins every key in its round and answers all true", "[server]") {
  ServerHarness h;
  h.Publish({1, 2, 3});
  h.Lookup("a", {1, 2, 3}, 0);
  REQUIRE(h.log.Count<LookupResp>() == 1);
  REQUIRE(h.All<LookupResp>()[0].hits == std::vector<bool>{true, true, true});
  REQUIRE(h.region->live_pins(1) == 1);
  REQUIRE(h.region->live_pins(2) == 1);
  REQUIRE(h.region->live_pins(3) == 1);
  REQUIRE(h.Results().empty());  // lookup pins are no store jobs
  h.index.Unpublish(Key(1));     // the round's pin keeps the promised block
  REQUIRE(h.region->live_pins(1) == 1);
  REQUIRE(h.TerminalFetch("a", 0).ok());
  RequireIdle(h);
}

TEST_CASE("E23 all-miss lookup answers all false and pins nothing", "[server]") {
  ServerHarness h;
  h.Lookup("a", {1, 2}, 0);
  REQUIRE(h.All<LookupResp>().at(0).hits == std::vector<bool>{false, false});
  REQUIRE(h.region->total_live_pins() == 0);
  REQUIRE(h.TerminalFetch("a", 0).ok());
  RequireIdle(h);
}

TEST_CASE("E24 analogue: mixed hits answer in wire order, duplicates repeated, pinned once", "[server]") {
  ServerHarness h;
  h.Publish({1, 3});
  h.Lookup("a", {1, 2, 3, 1}, 0);
  const LookupResp resp = h.All<LookupResp>().at(0);
  REQUIRE(resp.keys == Keys({1, 2, 3, 1}));
  REQUIRE(resp.hits == std::vector<bool>{true, false, true, true});
  REQUIRE(h.region->live_pins(1) == 1);
  REQUIRE(h.region->live_pins(3) == 1);
  REQUIRE(h.TerminalFetch("a", 0).ok());
  RequireIdle(h);
}

TEST_CASE("E26 analogue: two lookups in one round, two answers, one shared supply", "[server]") {
  ServerHarness h;
  h.Publish({1, 2, 3});
  h.Lookup("a", {1, 2}, 0);
  h.Lookup("a", {2, 3}, 0);
  REQUIRE(h.log.Count<LookupResp>() == 2);
  REQUIRE(h.region->live_pins(2) == 1);  // a key already pinned in the round is not pinned again
  REQUIRE(h.Fetch("a", {1, 2, 3}, {0, 1, 2}, 0).ok());
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
  RequireIdle(h);
}

TEST_CASE("E27 analogue: the terminal empty fetch releases only that request's lookup pins", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1}, 0);
  h.Lookup("b", {2}, 1);
  h.log.Clear();
  REQUIRE(h.TerminalFetch("a", 0).ok());
  REQUIRE(h.log.frames.empty());  // no lookup_resp, no transfer_done
  REQUIRE(h.region->live_pins(1) == 0);
  REQUIRE(h.region->live_pins(2) == 1);
  REQUIRE(h.role->TrackedRequests() == 1);
  REQUIRE(h.TerminalFetch("b", 1).ok());
  RequireIdle(h);
}

TEST_CASE("E28 analogue: close with parked lookup pins drops them, owes nothing", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 0);
  h.log.Clear();
  REQUIRE(h.role->Close("peer gone").empty());
  REQUIRE(h.log.frames.empty());
  REQUIRE(h.region->total_live_pins() == 0);
  REQUIRE(h.role->TrackedRequests() == 0);
}

TEST_CASE("E29 lookup, fetch, transfer: pinned sources go to the consumer's indexes", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 0);
  REQUIRE(h.Fetch("a", {1, 2}, {10, 11}, 0).ok());
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"lookup_resp", "block_data", "transfer_done"});
  REQUIRE(h.All<BlockData>()[0].block_indexes == std::vector<protocol::SlotIndex>{10, 11});
  const auto received = h.Received("a", 0);
  REQUIRE(received.at(10) == h.BlockBytes(1));
  REQUIRE(received.at(11) == h.BlockBytes(2));
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 0));
  RequireIdle(h);
}

TEST_CASE("E30 store before fetch and fetch before store both match", "[server]") {
  ServerHarness h;
  SECTION("store first") {
    h.Store(1, "a", {1, 2});
    REQUIRE_FALSE(h.role->HasDataToSend());
    REQUIRE(h.Fetch("a", {1, 2}, {5, 6}, 3).ok());
  }
  SECTION("fetch first") {
    REQUIRE(h.Fetch("a", {1, 2}, {5, 6}, 3).ok());
    REQUIRE_FALSE(h.role->HasDataToSend());
    h.Store(1, "a", {1, 2});
  }
  REQUIRE(h.role->HasDataToSend());
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "transfer_done"});
  REQUIRE(h.Received("a", 3).at(6) == h.BlockBytes(2));
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 3));
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 1);
  REQUIRE(results[0].success);
  RequireIdle(h);
}

TEST_CASE("E31 partial matching: two stores, transfer_done only when all demand is sent", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1, 2, 3}, {0, 1, 2}, 0).ok());
  h.Store(1, "a", {1});
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"block_data"});
  REQUIRE(h.Results().size() == 1);  // job 1 delivered all it was asked for
  h.Store(2, "a", {2, 3});
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "block_data", "transfer_done"});
  REQUIRE(h.Received("a", 0).size() == 3);
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 0));
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 2);
  REQUIRE(results[0].success);
  RequireIdle(h);
}

TEST_CASE("E32 a second non-empty fetch for a round with demand is a violation", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  SECTION("disaggregated round") { REQUIRE(h.Fetch("a", {1}, {0}, 4).ok()); }
  SECTION("symmetric round") {
    h.Lookup("a", {1, 2}, 4);
    REQUIRE(h.Fetch("a", {1}, {0}, 4).ok());
  }
  const Status status = h.Fetch("a", {2}, {1}, 4);
  REQUIRE(status.code() == Status::Code::kViolation);
  REQUIRE(status.message() == "duplicate fetch for kv_request_id a round 4");
  REQUIRE(h.role->Close(status.message()).empty());
  h.WriteFrames();
  REQUIRE(h.region->total_live_pins() == 0);
}

TEST_CASE("E33 terminal empty fetch: no transfer_done, request pruned, next round is fresh", "[server]") {
  ServerHarness h;
  h.Publish({1});
  h.Lookup("a", {1}, 0);
  REQUIRE(h.TerminalFetch("a", 0).ok());
  REQUIRE(h.Types() == std::vector<std::string>{"lookup_resp"});
  REQUIRE(h.role->TrackedRequests() == 0);
  REQUIRE(h.region->total_live_pins() == 0);
  REQUIRE(h.role->TakeNewFetchIds().empty());  // only non-empty fetches bind supply
  h.Lookup("a", {1}, 1);
  REQUIRE(h.Fetch("a", {1}, {0}, 1).ok());
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 1));
  RequireIdle(h);
}

TEST_CASE("E34 symmetric fetch of a key not pinned in its round fails at once, no partial transfer", "[server]") {
  ServerHarness h;
  h.Publish({1});
  h.Lookup("a", {1, 2}, 0);
  h.Publish({2});  // published after the lookup: still not pinned in round 0
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  REQUIRE(h.Types() == std::vector<std::string>{"lookup_resp", "transfer_done"});
  REQUIRE(Done(h.All<TransferDone>()[0], "a", false, 0));
  REQUIRE(h.Drain() == 0);
  REQUIRE(h.log.Count<BlockData>() == 0);
  RequireIdle(h);
}

TEST_CASE("a source region truncated under its pins fails the round, not the connection", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 0);
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Store(7, "pd", {3});
  REQUIRE(h.role->OnFetch(protocol::Fetch{"pd", {Key(3)}, {5}, 1}).ok());
  h.region->Truncate();
  h.Drain();
  REQUIRE(h.log.Count<BlockData>() == 0);  // nothing read from the gone memory
  REQUIRE(h.All<TransferDone>().size() == 2);
  for (const TransferDone& done : h.All<TransferDone>()) REQUIRE_FALSE(done.success);
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 7);
  REQUIRE_FALSE(results[0].success);
  REQUIRE(results[0].reason.find("no longer mapped") != std::string::npos);
  RequireIdle(h);
}

// Parked until the unsupplied timeout (wire spec 1.1 section 6), which
// tests/session/internal/round_bounds_test.cc covers.
TEST_CASE("E35 disaggregated fetch with unmatched demand is parked, not failed", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.clock.Advance(std::chrono::seconds(59));
  h.role->OnTick();
  REQUIRE(h.log.frames.empty());
  REQUIRE(h.role->RoundsServing() == 1);
  REQUIRE_FALSE(h.role->HasDataToSend());
  h.Store(1, "a", {1, 2});
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
  RequireIdle(h);
}

TEST_CASE("E36 round 0 completion keeps round 1 supply", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1}, 0);
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Lookup("a", {2}, 1);  // the next round probes before round 0 is sent
  h.Drain();
  REQUIRE(h.All<TransferDone>().size() == 1);
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 0));
  REQUIRE(h.region->live_pins(2) == 1);
  REQUIRE(h.Fetch("a", {2}, {1}, 1).ok());
  h.Drain();
  REQUIRE(h.All<TransferDone>().size() == 2);
  REQUIRE(Done(h.All<TransferDone>()[1], "a", true, 1));
  REQUIRE(h.Received("a", 1).at(1) == h.BlockBytes(2));
  RequireIdle(h);
}

TEST_CASE("E37 abort of round 0 fails its jobs promptly and leaves round 1 intact", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  REQUIRE(h.Fetch("a", {2}, {1}, 1).ok());
  h.Store(1, "a", {1});
  h.Store(2, "a", {2});
  h.Abort("a", 0);
  auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 1);
  REQUIRE_FALSE(results[0].success);
  REQUIRE(results[0].failure == JobFailure::kAborted);
  REQUIRE(h.region->live_pins(1) == 0);
  REQUIRE(h.region->live_pins(2) == 1);
  h.Drain();
  REQUIRE(h.Types() == std::vector<std::string>{"abort_ack", "block_data", "transfer_done"});
  REQUIRE(h.All<BlockData>()[0].round_seq == 1);
  REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 1));
  results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 2);
  REQUIRE(results[0].success);
  RequireIdle(h);
}

TEST_CASE("E38 keys probed but not fetched are released with the round; a re-probe pins afresh", "[server]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 0);
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  REQUIRE(h.region->live_pins(2) == 0);  // the demand is final: key 2 will never be sent in round 0
  h.Drain();
  h.Lookup("a", {2}, 1);
  REQUIRE(h.All<LookupResp>().back().hits == std::vector<bool>{true});
  REQUIRE(h.region->live_pins(2) == 1);
  REQUIRE(h.TerminalFetch("a", 1).ok());
  RequireIdle(h);
}

TEST_CASE("E39 abort_fetch for an unknown request is acked at once", "[server]") {
  ServerHarness h;
  h.Abort("nobody", 9);
  REQUIRE(h.Types() == std::vector<std::string>{"abort_ack"});
  const AbortAck ack = h.All<AbortAck>()[0];
  REQUIRE(ack.kv_request_id == "nobody");
  REQUIRE(ack.round_seq == 9);
  RequireIdle(h);
}

TEST_CASE("E40 analogue: abort while a produced frame is unwritten: ack now, frame keeps its pins", "[server]") {
  ServerHarness h(OneBlockFrames());
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Store(1, "a", {1, 2});
  REQUIRE(h.role->ProduceDataFrame());  // the writer now owns this frame
  h.Abort("a", 0);
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "abort_ack"});
  REQUIRE(h.region->live_pins(1) == 1);  // read by the unwritten frame
  REQUIRE(h.region->live_pins(2) == 0);
  REQUIRE(h.Results().empty());  // the failure frees slot 1: not before the frame is written
  h.WriteFrames();
  REQUIRE_FALSE(h.Pull());  // nothing more of the aborted round
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE_FALSE(results[0].success);
  REQUIRE(h.log.Count<AbortAck>() == 1);
  REQUIRE(h.log.Count<TransferDone>() == 0);
  RequireIdle(h);
}

TEST_CASE("E42 duplicate abort_fetch gets one abort_ack", "[server]") {
  ServerHarness h;
  SECTION("known round") {
    REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
    h.Store(1, "a", {1});
  }
  SECTION("unknown round") {}
  h.Abort("a", 0);
  h.Abort("a", 0);
  REQUIRE(h.log.Count<AbortAck>() == 1);
  REQUIRE(h.Drain() == 0);
  REQUIRE(h.Results().size() <= 1);
  RequireIdle(h);
}

TEST_CASE("E43 store timeout fails the job once; later events add no second result", "[server]") {
  ServerHarness h;
  h.Store(1, "a", {1});
  REQUIRE(h.role->NextDeadline() == h.clock.now() + std::chrono::seconds(60));
  h.clock.Advance(std::chrono::seconds(59));
  h.role->OnTick();
  REQUIRE(h.Results().empty());
  h.clock.Advance(std::chrono::seconds(1));
  h.role->OnTick();
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE_FALSE(results[0].success);
  REQUIRE(results[0].reason == "store job 1 for kv_request_id a: not fetched within 60 s");
  REQUIRE(results[0].failure == JobFailure::kTimeout);
  REQUIRE(h.region->total_live_pins() == 0);
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());  // too late: demand parks, no second result
  h.role->Finish("a");
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", false, 0));
  h.clock.Advance(std::chrono::seconds(600));
  h.role->OnTick();
  h.Drain();
  REQUIRE(h.Results().empty());
  REQUIRE(h.log.Count<TransferDone>() == 1);
  RequireIdle(h);
}

TEST_CASE("E44 producer finish with unmatched demand and nothing queued fails the round now", "[server]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Store(1, "a", {1, 3});  // key 3 is not demanded: dropped at once
  REQUIRE(h.region->live_pins(3) == 0);
  h.Drain();
  auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].success);
  h.Store(2, "a", {7});  // demanded by no round: waits for a later fetch
  REQUIRE(h.log.Count<TransferDone>() == 0);
  h.role->Finish("a");
  REQUIRE(h.Types() == std::vector<std::string>{"block_data", "transfer_done"});
  REQUIRE(Done(h.All<TransferDone>()[0], "a", false, 0));
  REQUIRE(h.Results().empty());  // the unrelated job keeps waiting (a deviation: docs/edge-cases.md, E44) ...
  h.clock.Advance(std::chrono::seconds(60));
  h.role->OnTick();
  results = h.Results();  // ... until its store timeout
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].job_id == 2);
  REQUIRE_FALSE(results[0].success);
  RequireIdle(h);
}

TEST_CASE("E45 producer finish while sending defers to the last frame", "[server]") {
  ServerHarness h(OneBlockFrames());
  REQUIRE(h.Fetch("a", {1, 2, 3}, {0, 1, 2}, 0).ok());
  bool expect_success = true;
  SECTION("all demand supplied") { h.Store(1, "a", {1, 2, 3}); }
  SECTION("demand left unmatched") {
    h.Store(1, "a", {1, 2});
    expect_success = false;
  }
  REQUIRE(h.Pull());
  h.role->Finish("a");
  REQUIRE(h.log.Count<TransferDone>() == 0);
  h.Drain();
  REQUIRE(h.Types().back() == "transfer_done");
  REQUIRE(h.log.Count<TransferDone>() == 1);
  REQUIRE(Done(h.All<TransferDone>()[0], "a", expect_success, 0));
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].success);  // it delivered every block asked of it
  RequireIdle(h);
}

TEST_CASE("E46 prefiller first: store, finish, then fetch", "[server]") {
  ServerHarness h;
  SECTION("fully satisfied") {
    h.Store(1, "a", {1, 2});
    h.role->Finish("a");
    REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
    h.Drain();
    REQUIRE(h.Types() == std::vector<std::string>{"block_data", "transfer_done"});
    REQUIRE(Done(h.All<TransferDone>()[0], "a", true, 0));
    REQUIRE(h.Results().at(0).success);
  }
  SECTION("partially satisfied") {
    h.Store(1, "a", {1});
    h.role->Finish("a");
    REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
    h.Drain();
    REQUIRE(h.Types() == std::vector<std::string>{"block_data", "transfer_done"});
    REQUIRE(h.All<BlockData>()[0].block_indexes == std::vector<protocol::SlotIndex>{0});
    REQUIRE(Done(h.All<TransferDone>()[0], "a", false, 0));
    REQUIRE(h.Results().at(0).success);
  }
  SECTION("nothing matches") {
    h.Store(1, "a", {5});
    h.role->Finish("a");
    REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
    REQUIRE(h.Types() == std::vector<std::string>{"transfer_done"});
    REQUIRE(Done(h.All<TransferDone>()[0], "a", false, 0));
    h.clock.Advance(std::chrono::seconds(60));
    h.role->OnTick();
    REQUIRE_FALSE(h.Results().at(0).success);
  }
  RequireIdle(h);
}

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
