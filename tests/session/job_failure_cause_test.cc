// Every failed load and store job carries its cause as a value
// (session_types.h, JobFailure): the daemon's labels and counters come from
// it, so rewording a reason, or a peer's disconnect text, cannot move a metric.
#include <catch2/catch.hpp>

#include "protocol/block_checksum.h"
#include "session/unbound_supply.h"
#include "tests/session/client_fixture.h"
#include "tests/session/server_harness.h"

namespace kvpeer::session {
namespace {

using namespace std::chrono_literals;
using testing::ClientFixture;
using testing::SingleResult;

TEST_CASE("a success has no failure cause", "[client][cause]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r", {0}).round_seq;
  REQUIRE(f.Deliver("r", round, {0}).ok());
  REQUIRE(f.Done("r", round).ok());
  const JobResult result = SingleResult(f.role);
  CHECK(result.success);
  CHECK(result.failure == JobFailure::kNone);
}

TEST_CASE("each way a load fails in the client role has its cause", "[client][cause]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r", {0, 1}).round_seq;
  SECTION("the load timeout") {
    f.clock.Advance(31s);
    f.role.OnTick();
    CHECK(SingleResult(f.role).failure == JobFailure::kTimeout);
  }
  SECTION("a local finish") {
    f.role.Finish("r");
    CHECK(SingleResult(f.role).failure == JobFailure::kRequestFinished);
  }
  SECTION("the producer's transfer_done false") {
    REQUIRE(f.Done("r", round, false).ok());
    CHECK(SingleResult(f.role).failure == JobFailure::kPeerFailed);
  }
  SECTION("transfer_done before every block") {
    REQUIRE(f.Deliver("r", round, {0}).ok());
    REQUIRE(f.Done("r", round).ok());
    CHECK(SingleResult(f.role).failure == JobFailure::kIncomplete);
  }
  SECTION("a destination that could not be written") {
    REQUIRE(f.Header("r", round, {0}).ok());
    f.role.FailOpenFrame("a destination slot is no longer mapped");
    CHECK(SingleResult(f.role).failure == JobFailure::kSlotsUnmapped);
  }
  SECTION("a block whose checksum does not match") {
    f.role.EnableChecksums();
    f.frame = protocol::BlockData{"r", round, {0}};
    f.frame.xxh3 = protocol::BlockChecksums::Of({0x1234});
    f.plan = BlockDataPlan{};
    REQUIRE(f.role.OnBlockDataHeader(f.frame, &f.plan).ok());
    f.role.OnBlockDataComplete(f.frame);
    const JobResult result = SingleResult(f.role);
    CHECK(result.failure == JobFailure::kChecksum);
    CHECK_THAT(result.reason, Catch::Contains("checksum mismatch"));
  }
  SECTION("the session closing, for whatever reason it gives") {
    ClientCloseResult closed = f.role.Close("peer disconnected: kvpeerd is shutting down");
    REQUIRE(closed.failed_loads.size() == 1);
    CHECK(closed.failed_loads[0].failure == JobFailure::kSessionClosed);
  }
  SECTION("this node shutting down") {
    ClientCloseResult closed = f.role.Close("kvpeerd is shutting down", JobFailure::kShutdown);
    REQUIRE(closed.failed_loads.size() == 1);
    CHECK(closed.failed_loads[0].failure == JobFailure::kShutdown);
  }
}

TEST_CASE("a failure reported after its open frame landed keeps its cause", "[client][cause]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r", {0, 1}).round_seq;
  REQUIRE(f.Header("r", round, {0}).ok());
  f.clock.Advance(31s);
  f.role.OnTick();  // the timeout, while the frame's payload is arriving
  CHECK(f.role.TakeResults().empty());
  f.Payload();
  CHECK(SingleResult(f.role).failure == JobFailure::kTimeout);
}

using testing::server_test::ServerHarness;

JobResult OnlyStoreResult(ServerHarness& h) {
  std::vector<JobResult> results = h.Results();
  REQUIRE(results.size() == 1);
  return results.front();
}

TEST_CASE("each way a store job fails has its cause", "[server][cause]") {
  ServerHarness h;
  h.Store(1, "a", {1});
  SECTION("the consumer finished without fetching (its terminal empty fetch)") {
    REQUIRE(h.TerminalFetch("a", 0).ok());
    CHECK(OnlyStoreResult(h).failure == JobFailure::kUnfetched);
  }
  SECTION("the session closed") {
    std::vector<JobResult> closed = h.role->Close("peer disconnected: kvpeerd is shutting down");
    REQUIRE(closed.size() == 1);
    CHECK(closed[0].failure == JobFailure::kSessionClosed);
  }
  SECTION("this node shutting down") {
    std::vector<JobResult> closed = h.role->Close("kvpeerd is shutting down", JobFailure::kShutdown);
    REQUIRE(closed.size() == 1);
    CHECK(closed[0].failure == JobFailure::kShutdown);
  }
  SECTION("a store with the job id of an open one is refused") {
    h.Store(1, "a", {2});
    CHECK(OnlyStoreResult(h).failure == JobFailure::kRefused);
  }
}

TEST_CASE("parked supply fails as a timeout or as the canceller says", "[cause]") {
  UnboundSupply parked(std::chrono::seconds(60));
  const TimePoint start{};
  parked.Add(1, "a", {"k"}, {nullptr}, start);
  parked.Add(2, "b", {"k"}, {nullptr}, start + std::chrono::seconds(30));
  std::vector<JobResult> expired = parked.OnTick(start + std::chrono::seconds(60));
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].failure == JobFailure::kTimeout);
  std::vector<JobResult> cancelled = parked.CancelAll(JobFailure::kShutdown, "kvpeerd is shutting down");
  REQUIRE(cancelled.size() == 1);
  CHECK(cancelled[0].failure == JobFailure::kShutdown);
}

}  // namespace
}  // namespace kvpeer::session
