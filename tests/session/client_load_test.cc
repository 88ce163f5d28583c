// ClientRole: loads from fetch to result. Edge cases E1-E7, E18 and E19
// (docs/edge-cases.md, "Loads on the consumer", "Finish on the consumer" and
// "Concurrent loads"), and the wire spec section 6
// rules on block_data, transfer_done, abort and timeouts. Every delivery
// writes real bytes through the plan's spans into a MemoryRegion, and the
// tests check the slots.
#include <catch2/catch.hpp>
#include <map>

#include "tests/session/client_fixture.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using protocol::AbortFetch;
using protocol::Fetch;

TEST_CASE("E1 a duplicate transfer_done gives no second result", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  REQUIRE(f.Deliver("r1", round, {0}).ok());
  REQUIRE(f.Done("r1", round).ok());
  CHECK(SingleResult(f.role).success);
  CHECK(f.Done("r1", round).ok());
  CHECK(f.Done("r1", round, false).ok());
  CHECK(f.role.TakeResults().empty());
}

TEST_CASE("E2 transfer_done for an unknown request or round is ignored", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  CHECK(f.Done("nobody", round).ok());
  CHECK(f.Done("r1", round + 10).ok());
  CHECK(f.role.TakeResults().empty());
  CHECK(f.role.LoadsInFlight() == 1);
  SECTION("raced with a local finish") {
    f.role.Finish("r1");
    f.role.TakeResults();
    CHECK(f.Done("r1", round).ok());
    CHECK(f.role.TakeResults().empty());
  }
  SECTION("raced with the abort-ack timeout") {
    f.clock.Advance(40s);
    f.role.OnTick();
    f.clock.Advance(10s);
    f.role.OnTick();
    f.role.TakeResults();
    CHECK(f.Done("r1", round).ok());
    CHECK(f.role.TakeResults().empty());
  }
}

TEST_CASE("E3 abort_ack for an unknown round is ignored", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  CHECK(f.Ack("nobody", round).ok());
  CHECK(f.Ack("r1", round + 1).ok());
  // An ack for a round we never aborted does not touch the load.
  CHECK(f.Ack("r1", round).ok());
  CHECK(f.role.LoadsInFlight() == 1);
  f.role.Finish("r1");
  CHECK(f.Ack("r1", round).ok());
  CHECK(f.Ack("r1", round).ok());  // after retirement: unknown
  CHECK(SingleResult(f.role).reason == "request finished");
  CHECK(f.role.TrackedRequests() == 0);
}

TEST_CASE("E4 the load timeout sends exactly one abort_fetch and fails the load at once", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  f.clock.Advance(29s);
  f.role.OnTick();
  CHECK(f.log.Count<AbortFetch>() == 0);
  CHECK(f.role.TakeResults().empty());
  f.clock.Advance(1s);
  f.role.OnTick();
  auto aborts = f.log.All<AbortFetch>();
  REQUIRE(aborts.size() == 1);
  CHECK(aborts[0] == AbortFetch{"r1", round});
  const JobResult result = SingleResult(f.role);
  CHECK(result.job_id == 1);
  CHECK_FALSE(result.success);
  CHECK(result.reason == "load timed out after 30 s");
  f.clock.Advance(5s);
  f.role.OnTick();
  CHECK(f.log.Count<AbortFetch>() == 1);
  CHECK(f.role.LoadsInFlight() == 0);
  CHECK(f.role.HasActiveLoads());  // the round awaits abort_ack
}

TEST_CASE("E5 the abort-ack timeout retires the round with no second result", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  f.clock.Advance(30s);
  f.role.OnTick();
  CHECK(f.role.TakeResults().size() == 1);
  CHECK(f.role.NextDeadline() == f.clock.now() + 10s);
  f.clock.Advance(10s);
  f.role.OnTick();
  CHECK(f.role.TakeResults().empty());
  CHECK(f.log.Count<AbortFetch>() == 1);  // not resent
  CHECK_FALSE(f.role.HasActiveLoads());
  CHECK(f.role.TrackedRequests() == 0);
  CHECK_FALSE(f.role.NextDeadline());
  // The round is gone for good: its data is now a violation.
  CHECK(f.Header("r1", round, {0}).code() == Status::Code::kViolation);
}

// Decided for E6: the seed drops the load with no result; we fail it at
// once, because every load gets exactly one result and our role controls
// every write into its slots.
TEST_CASE("E6 finish with a load in flight aborts it and fails it at once", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0, 1}).round_seq;
  REQUIRE(f.Deliver("r1", round, {0}).ok());
  f.role.Finish("r1");
  CHECK(f.log.All<AbortFetch>() == std::vector<AbortFetch>{{"r1", round}});
  const JobResult result = SingleResult(f.role);
  CHECK(result.job_id == 1);
  CHECK_FALSE(result.success);
  CHECK(result.reason == "request finished");
  CHECK(f.role.LoadsInFlight() == 0);
  REQUIRE(f.Ack("r1", round).ok());
  CHECK(f.role.TakeResults().empty());
  CHECK(f.role.TrackedRequests() == 0);
}

TEST_CASE("E7 finish with a load already aborting sends no second abort", "[client]") {
  ClientFixture f;
  f.PdLoad(1, "r1", {0});
  f.clock.Advance(30s);
  f.role.OnTick();
  f.role.Finish("r1");
  CHECK(f.log.Count<AbortFetch>() == 1);
  CHECK(f.role.TakeResults().size() == 1);
}

TEST_CASE("E18 concurrent loads of one request complete by round", "[client]") {
  ClientFixture f;
  const auto r0 = f.PdLoad(10, "r1", {0, 1}).round_seq;
  const auto r1 = f.PdLoad(11, "r1", {2}).round_seq;
  REQUIRE(r0 != r1);
  CHECK(f.role.LoadsInFlight() == 2);
  REQUIRE(f.Deliver("r1", r1, {2}).ok());
  REQUIRE(f.Done("r1", r1).ok());
  const JobResult second = SingleResult(f.role);
  CHECK(second.job_id == 11);
  CHECK(second.success);
  REQUIRE(f.Deliver("r1", r0, {1, 0}).ok());
  REQUIRE(f.Done("r1", r0).ok());
  const JobResult first = SingleResult(f.role);
  CHECK(first.job_id == 10);
  CHECK(first.success);
  CHECK(f.SlotBytes(0) == BlockBytes(r0, 0));
  CHECK(f.SlotBytes(1) == BlockBytes(r0, 1));
  CHECK(f.SlotBytes(2) == BlockBytes(r1, 2));
  // A round's indexes belong to that round only.
  const auto r2 = f.PdLoad(12, "r1", {3}).round_seq;
  CHECK(f.Header("r1", r2, {2}).code() == Status::Code::kViolation);
}

TEST_CASE("E19 active loads: probes do not count, a fetch adds, its retirement removes", "[client]") {
  ClientFixture f;
  f.Probe("probe-only", {TestKey(1)});
  CHECK_FALSE(f.role.HasActiveLoads());
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  CHECK(f.role.HasActiveLoads());
  REQUIRE(f.Deliver("r1", round, {0}).ok());
  REQUIRE(f.Done("r1", round).ok());
  CHECK_FALSE(f.role.HasActiveLoads());
  CHECK(f.role.TrackedRequests() == 1);  // only the probing request
}

TEST_CASE("spec6 success needs transfer_done true and every index exactly once", "[client]") {
  ClientFixture f;
  const Fetch fetch = f.PdLoad(1, "r1", {5, 2, 9});
  const auto round = fetch.round_seq;
  REQUIRE(f.Header("r1", round, {9, 5}).ok());
  // The plan points at the slots named by the frame, in frame order.
  REQUIRE(f.plan.targets.size() == 2);
  CHECK(f.plan.targets[0].data() == f.region->Block(9).data());
  CHECK(f.plan.targets[1].data() == f.region->Block(5).data());
  CHECK(f.plan.targets[0].size() == kClientBlockLen);
  CHECK_FALSE(f.plan.discard);
  f.Payload();
  REQUIRE(f.Deliver("r1", round, {2}).ok());
  REQUIRE(f.Done("r1", round).ok());
  const JobResult result = SingleResult(f.role);
  CHECK(ResultText(result) == "job 1 r1 ok");
  for (protocol::SlotIndex i : {5u, 2u, 9u}) CHECK(f.SlotBytes(i) == BlockBytes(round, i));
  CHECK(f.SlotUntouched(0));
  CHECK(f.role.TrackedRequests() == 0);
  CHECK_FALSE(f.role.NextDeadline());
}

TEST_CASE("spec6 transfer_done before every block, or reporting failure, fails the load", "[client]") {
  ClientFixture f;
  SECTION("missing blocks") {
    const auto round = f.PdLoad(1, "r1", {0, 1, 2, 3, 4}).round_seq;
    REQUIRE(f.Deliver("r1", round, {0, 1}).ok());
    REQUIRE(f.Deliver("r1", round, {4}).ok());
    REQUIRE(f.Done("r1", round).ok());
    CHECK(ResultText(SingleResult(f.role)) == "job 1 r1 failed: transfer_done before all blocks arrived: 3 of 5");
  }
  SECTION("peer reports failure after every block") {
    const auto round = f.PdLoad(1, "r1", {0}).round_seq;
    REQUIRE(f.Deliver("r1", round, {0}).ok());
    REQUIRE(f.Done("r1", round, false).ok());
    CHECK(ResultText(SingleResult(f.role)) == "job 1 r1 failed: peer reported failure");
  }
  CHECK(f.role.LoadsInFlight() == 0);
  CHECK(f.role.TrackedRequests() == 0);
}

TEST_CASE("spec6 block_data outside the load's not-yet-received indexes is a violation", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {3, 7}).round_seq;
  const std::string prefix = "block_data for kv_request_id r1 round " + std::to_string(round) + ": ";
  SECTION("an index that was not requested") {
    Status s = f.Header("r1", round, {3, 4});
    CHECK(s.code() == Status::Code::kViolation);
    CHECK(s.message() == prefix + "index 4 was not requested");
    CHECK(f.plan.targets.empty());
    CHECK(f.SlotUntouched(3));
  }
  SECTION("an index twice within one frame") {
    Status s = f.Header("r1", round, {7, 7});
    CHECK(s.code() == Status::Code::kViolation);
    CHECK(s.message() == prefix + "index 7 appears twice in the frame");
  }
  SECTION("an index again in a later frame") {
    REQUIRE(f.Deliver("r1", round, {7}).ok());
    const auto landed = f.SlotBytes(7);
    Status s = f.Header("r1", round, {3, 7});
    CHECK(s.code() == Status::Code::kViolation);
    CHECK(s.message() == prefix + "index 7 was already received");
    CHECK(f.SlotBytes(7) == landed);
  }
  SECTION("a round that was never fetched") {
    Status s = f.Header("r1", round + 5, {3});
    CHECK(s.code() == Status::Code::kViolation);
    CHECK_THAT(s.message(), Catch::Contains("no load of this round is in flight"));
  }
  SECTION("another request's round") { CHECK(f.Header("r2", round, {3}).code() == Status::Code::kViolation); }
  SECTION("a round retired by transfer_done") {
    REQUIRE(f.Deliver("r1", round, {3, 7}).ok());
    REQUIRE(f.Done("r1", round).ok());
    CHECK(f.Header("r1", round, {3}).code() == Status::Code::kViolation);
  }
  SECTION("a round retired by abort_ack") {
    f.role.Finish("r1");
    REQUIRE(f.Ack("r1", round).ok());
    CHECK(f.Header("r1", round, {3}).code() == Status::Code::kViolation);
    CHECK(f.SlotUntouched(3));
  }
}

TEST_CASE("spec6 a rejected frame leaves the load intact", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {3, 7}).round_seq;
  REQUIRE(f.Header("r1", round, {3, 9}).code() == Status::Code::kViolation);
  // Index 3 was not taken by the rejected frame.
  REQUIRE(f.Deliver("r1", round, {3, 7}).ok());
  REQUIRE(f.Done("r1", round).ok());
  CHECK(SingleResult(f.role).success);
}

TEST_CASE("spec6 late data after abort is discarded and never written", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0, 1}).round_seq;
  SECTION("after finish") { f.role.Finish("r1"); }
  SECTION("after the load timeout") {
    f.clock.Advance(30s);
    f.role.OnTick();
  }
  CHECK(SingleResult(f.role).success == false);
  // Even indexes the load never asked for are discarded, not judged.
  for (std::vector<protocol::SlotIndex> indexes : {std::vector<protocol::SlotIndex>{0, 1}, {5}}) {
    REQUIRE(f.Header("r1", round, indexes).ok());
    CHECK(f.plan.discard);
    CHECK(f.plan.targets.empty());
    f.Payload();
  }
  CHECK(f.SlotUntouched(0));
  CHECK(f.SlotUntouched(1));
  CHECK(f.SlotUntouched(5));
  // transfer_done of the aborted round changes nothing; abort_ack retires it.
  REQUIRE(f.Done("r1", round).ok());
  CHECK(f.role.HasActiveLoads());
  REQUIRE(f.Ack("r1", round).ok());
  CHECK(f.role.TakeResults().empty());
  CHECK(f.Header("r1", round, {0}).code() == Status::Code::kViolation);
  CHECK(f.role.TrackedRequests() == 0);
}

TEST_CASE("spec6 a load ended while its payload lands reports only once the payload is in", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0, 1}).round_seq;
  REQUIRE(f.Header("r1", round, {0}).ok());
  SECTION("by finish") {
    f.role.Finish("r1");
    CHECK(f.role.TakeResults().empty());
    f.Payload();
    CHECK(SingleResult(f.role).reason == "request finished");
  }
  SECTION("by the load timeout") {
    f.clock.Advance(30s);
    f.role.OnTick();
    CHECK(f.role.TakeResults().empty());
    CHECK(f.role.LoadsInFlight() == 1);
    f.Payload();
    CHECK(SingleResult(f.role).reason == "load timed out after 30 s");
  }
  SECTION("abort-ack timeout while the payload lands") {
    f.role.Finish("r1");
    f.clock.Advance(10s);
    f.role.OnTick();
    CHECK_FALSE(f.role.NextDeadline());  // nothing due until the payload is in
    CHECK(f.role.TakeResults().empty());
    f.Payload();
    CHECK(SingleResult(f.role).reason == "request finished");
    CHECK_FALSE(f.role.HasActiveLoads());
    CHECK(f.role.TrackedRequests() == 0);
  }
  CHECK(f.log.Count<AbortFetch>() == 1);
  CHECK(f.role.LoadsInFlight() == 0);
  CHECK(f.SlotBytes(0) == BlockBytes(round, 0));  // the frame in progress finished
  CHECK(f.SlotUntouched(1));
}

TEST_CASE("an abandoned open frame reports the ended load at once; its late payload counts for nothing", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0, 1}).round_seq;
  REQUIRE(f.Header("r1", round, {0}).ok());
  CHECK_FALSE(f.role.OpenFrameAbandoned());  // the load is alive: its frame is just slow
  f.role.AbandonOpenFrame();                 // not abandoned: nothing happens
  CHECK(f.role.TakeResults().empty());
  SECTION("by the load timeout") {
    f.clock.Advance(30s);
    f.role.OnTick();
    REQUIRE(f.role.OpenFrameAbandoned());
    f.role.AbandonOpenFrame();  // the I/O layer diverted the rest of the payload
    CHECK_FALSE(f.role.OpenFrameAbandoned());
    CHECK(SingleResult(f.role).reason == "load timed out after 30 s");
    // The diverted frame's completion is a no-op; abort_ack retires the round.
    f.role.OnBlockDataComplete(protocol::BlockData{"r1", round, {0}});
    CHECK(f.role.TakeResults().empty());
    REQUIRE(f.role.OnAbortAck(protocol::AbortAck{"r1", round}).ok());
  }
  SECTION("by finish, then the abort-ack timeout") {
    f.role.Finish("r1");
    f.clock.Advance(10s);
    f.role.OnTick();
    REQUIRE(f.role.OpenFrameAbandoned());
    f.role.AbandonOpenFrame();
    CHECK(SingleResult(f.role).reason == "request finished");
  }
  CHECK_FALSE(f.role.HasActiveLoads());
  CHECK(f.role.TrackedRequests() == 0);
  CHECK(f.role.LoadsInFlight() == 0);
  CHECK(f.log.Count<AbortFetch>() == 1);
  CHECK(f.SlotUntouched(1));
}

TEST_CASE("a destination region truncated before or during a frame fails only its load", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0, 1}).round_seq;
  const auto other = f.PdLoad(2, "r2", {2}).round_seq;
  SECTION("before the header: the frame is discarded, nothing is written") {
    f.region->Truncate();
    protocol::BlockData frame{"r1", round, {0}};
    BlockDataPlan plan;
    REQUIRE(f.role.OnBlockDataHeader(frame, &plan).ok());
    CHECK(plan.discard);
    CHECK(plan.targets.empty());
  }
  SECTION("while its payload lands: the I/O layer reports the fault") {
    REQUIRE(f.Header("r1", round, {0}).ok());
    f.role.FailOpenFrame("a destination slot is no longer mapped (engine region truncated?)");
    CHECK_FALSE(f.role.OpenFrameAbandoned());
  }
  const JobResult result = SingleResult(f.role);
  CHECK(result.job_id == 1);
  CHECK(result.reason.find("no longer mapped") != std::string::npos);
  CHECK(f.log.Count<AbortFetch>() == 1);
  CHECK(f.role.LoadsInFlight() == 1);  // r2 goes on
  REQUIRE(f.role.OnAbortAck(protocol::AbortAck{"r1", round}).ok());
  (void)other;
}

TEST_CASE("spec6 timeouts are configurable and NextDeadline tracks them", "[client]") {
  ClientFixture f(ClientConfig{.load_timeout = 1500ms, .abort_ack_timeout = 200ms});
  CHECK_FALSE(f.role.NextDeadline());
  const TimePoint start = f.clock.now();
  f.PdLoad(1, "a", {0});
  f.clock.Advance(500ms);
  f.PdLoad(2, "b", {1});
  CHECK(f.role.NextDeadline() == start + 1500ms);
  f.clock.Advance(1000ms);
  f.role.OnTick();
  CHECK(ResultText(SingleResult(f.role)) == "job 1 a failed: load timed out after 1500 ms");
  // Now due: a's retirement (+200 ms), then b's timeout (+500 ms).
  CHECK(f.role.NextDeadline() == start + 1700ms);
  f.clock.Advance(200ms);
  f.role.OnTick();
  CHECK(f.role.TakeResults().empty());
  CHECK(f.role.NextDeadline() == start + 2000ms);
  f.clock.Advance(300ms);
  f.role.OnTick();
  CHECK(SingleResult(f.role).job_id == 2);
}

TEST_CASE("spec6 every load ends in exactly one result", "[client]") {
  ClientFixture f;
  const auto done = f.PdLoad(1, "done", {0}).round_seq;            // by transfer_done
  f.PdLoad(2, "late", {1});                                        // by the load timeout
  f.PdLoad(3, "finished", {2});                                    // by finish
  const auto receiving = f.PdLoad(4, "receiving", {3}).round_seq;  // by finish, deferred, then close
  f.clock.Advance(20s);
  f.PdLoad(5, "closed", {4});  // by close
  REQUIRE(f.Deliver("done", done, {0}).ok());
  REQUIRE(f.Done("done", done).ok());
  f.role.Finish("finished");
  REQUIRE(f.Header("receiving", receiving, {3}).ok());
  f.role.Finish("receiving");
  f.clock.Advance(10s);
  f.role.OnTick();
  f.role.Finish("finished");
  f.role.Finish("late");
  f.clock.Advance(10s);
  f.role.OnTick();
  const ClientCloseResult closed = f.role.Close("shutdown");
  std::map<JobId, int> count;
  for (const JobResult& r : f.role.TakeResults()) ++count[r.job_id];
  for (const JobResult& r : closed.failed_loads) ++count[r.job_id];
  CHECK(count == std::map<JobId, int>{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}});
  std::vector<JobId> failed_at_close;
  for (const JobResult& r : closed.failed_loads) failed_at_close.push_back(r.job_id);
  CHECK(failed_at_close == std::vector<JobId>{4, 5});
  CHECK(f.role.Close("again").failed_loads.empty());
  CHECK(f.role.TakeResults().empty());
}

TEST_CASE("spec6 the load still in flight at close fails with the close reason", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  const ClientCloseResult closed = f.role.Close("peer went away");
  REQUIRE(closed.failed_loads.size() == 1);
  CHECK(ResultText(closed.failed_loads[0]) == "job 1 r1 failed: peer went away");
  CHECK(f.role.TakeResults().empty());
  CHECK(f.Done("r1", round).ok());
  CHECK(f.role.TakeResults().empty());
}

}  // namespace
}  // namespace kvpeer::session::testing
