// Every failed load carries its cause as a value (session_types.h,
// LoadFailure): the daemon's labels and counters come from it, so rewording
// a reason, or a peer's disconnect text, cannot move a metric.
#include <catch2/catch.hpp>

#include "protocol/block_checksum.h"
#include "tests/session/client_fixture.h"

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
  CHECK(result.load_failure == LoadFailure::kNone);
}

TEST_CASE("each way a load fails in the client role has its cause", "[client][cause]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r", {0, 1}).round_seq;
  SECTION("the load timeout") {
    f.clock.Advance(31s);
    f.role.OnTick();
    CHECK(SingleResult(f.role).load_failure == LoadFailure::kTimeout);
  }
  SECTION("a local finish") {
    f.role.Finish("r");
    CHECK(SingleResult(f.role).load_failure == LoadFailure::kRequestFinished);
  }
  SECTION("the producer's transfer_done false") {
    REQUIRE(f.Done("r", round, false).ok());
    CHECK(SingleResult(f.role).load_failure == LoadFailure::kPeerFailed);
  }
  SECTION("transfer_done before every block") {
    REQUIRE(f.Deliver("r", round, {0}).ok());
    REQUIRE(f.Done("r", round).ok());
    CHECK(SingleResult(f.role).load_failure == LoadFailure::kIncomplete);
  }
  SECTION("a destination that could not be written") {
    REQUIRE(f.Header("r", round, {0}).ok());
    f.role.FailOpenFrame("a destination slot is no longer mapped");
    CHECK(SingleResult(f.role).load_failure == LoadFailure::kSlotsUnmapped);
  }
  SECTION("a block whose checksum does not match") {
    f.role.EnableChecksums();
    f.frame = protocol::BlockData{"r", round, {0}};
    f.frame.xxh3 = protocol::BlockChecksums::Of({0x1234});
    f.plan = BlockDataPlan{};
    REQUIRE(f.role.OnBlockDataHeader(f.frame, &f.plan).ok());
    f.role.OnBlockDataComplete(f.frame);
    const JobResult result = SingleResult(f.role);
    CHECK(result.load_failure == LoadFailure::kChecksum);
    CHECK_THAT(result.reason, Catch::Contains("checksum mismatch"));
  }
  SECTION("the session closing, for whatever reason it gives") {
    ClientCloseResult closed = f.role.Close("peer disconnected: kvpeerd is shutting down");
    REQUIRE(closed.failed_loads.size() == 1);
    CHECK(closed.failed_loads[0].load_failure == LoadFailure::kSessionClosed);
  }
  SECTION("this node shutting down") {
    ClientCloseResult closed = f.role.Close("kvpeerd is shutting down", LoadFailure::kShutdown);
    REQUIRE(closed.failed_loads.size() == 1);
    CHECK(closed.failed_loads[0].load_failure == LoadFailure::kShutdown);
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
  CHECK(SingleResult(f.role).load_failure == LoadFailure::kTimeout);
}

}  // namespace
}  // namespace kvpeer::session
