// UnboundSupply: store jobs parked until a peer fetches their request.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "session/unbound_supply.h"
#include "tests/session/fakes.h"

namespace kvpeer::session::testing {
namespace {

struct UnboundFixture {
  std::shared_ptr<MemoryRegion> region = std::make_shared<MemoryRegion>(16, 8);
  FakeClock clock;
  UnboundSupply supply;

  void Add(JobId job, const std::string& kv, std::vector<uint32_t> slots) {
    std::vector<protocol::Key> keys;
    std::vector<PinRef> pins;
    for (uint32_t slot : slots) {
      keys.push_back("key" + std::to_string(slot));
      pins.push_back(region->Pin(slot));
    }
    supply.Add(job, kv, std::move(keys), std::move(pins), clock.now());
  }
};

std::vector<JobId> Ids(const std::vector<JobResult>& results) {
  std::vector<JobId> ids;
  for (const JobResult& r : results) ids.push_back(r.job_id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST_CASE("unbound supply: Take hands a request's jobs over, oldest first, with their pins", "[server][unbound]") {
  UnboundFixture f;
  f.Add(1, "a", {1, 2});
  f.Add(2, "b", {3});
  f.Add(3, "a", {4});
  REQUIRE(f.supply.size() == 3);
  std::vector<ParkedStore> taken = f.supply.Take("a");
  REQUIRE(taken.size() == 2);
  REQUIRE(taken[0].job_id == 1);
  REQUIRE(taken[0].keys == std::vector<protocol::Key>{"key1", "key2"});
  REQUIRE(taken[0].blocks.size() == 2);
  REQUIRE(taken[1].job_id == 3);
  REQUIRE(f.region->live_pins(1) == 1);  // the pins travel with the jobs
  REQUIRE(f.supply.Take("a").empty());
  REQUIRE_FALSE(f.supply.Has("a"));
  taken.clear();
  REQUIRE(f.region->live_pins(1) == 0);
  // A taken job is no longer timed here.
  f.clock.Advance(std::chrono::seconds(61));
  REQUIRE(Ids(f.supply.OnTick(f.clock.now())) == std::vector<JobId>{2});
  REQUIRE(f.supply.empty());
  REQUIRE(f.region->total_live_pins() == 0);
}

TEST_CASE("unbound supply: a job no peer fetched fails after 60 s", "[server][unbound]") {
  UnboundFixture f;
  f.Add(1, "a", {1});
  REQUIRE(f.supply.NextDeadline() == f.clock.now() + std::chrono::seconds(60));
  f.clock.Advance(std::chrono::seconds(30));
  f.Add(2, "a", {2});
  f.clock.Advance(std::chrono::seconds(29));
  REQUIRE(f.supply.OnTick(f.clock.now()).empty());
  f.clock.Advance(std::chrono::seconds(1));
  const auto failed = f.supply.OnTick(f.clock.now());
  REQUIRE(failed.size() == 1);
  REQUIRE(failed[0].job_id == 1);
  REQUIRE(failed[0].kv_request_id == "a");
  REQUIRE_FALSE(failed[0].success);
  REQUIRE(failed[0].reason == "no peer fetched kv_request_id a within 60 s");
  REQUIRE(f.region->live_pins(1) == 0);
  REQUIRE(f.region->live_pins(2) == 1);  // job 2 has 30 s left
  REQUIRE(f.supply.NextDeadline() == f.clock.now() + std::chrono::seconds(30));
  f.clock.Advance(std::chrono::seconds(30));
  REQUIRE(Ids(f.supply.OnTick(f.clock.now())) == std::vector<JobId>{2});
  REQUIRE_FALSE(f.supply.NextDeadline().has_value());
  REQUIRE(f.region->total_live_pins() == 0);
}

TEST_CASE("unbound supply: the timeout is configurable", "[server][unbound]") {
  UnboundFixture f;
  f.supply = UnboundSupply(std::chrono::seconds(5));
  f.Add(1, "a", {1});
  f.clock.Advance(std::chrono::seconds(5));
  const auto failed = f.supply.OnTick(f.clock.now());
  REQUIRE(failed.size() == 1);
  REQUIRE(failed[0].reason == "no peer fetched kv_request_id a within 5 s");
}

TEST_CASE("unbound supply: Cancel and CancelAll fail jobs once with the reason", "[server][unbound]") {
  UnboundFixture f;
  f.Add(1, "a", {1});
  f.Add(2, "a", {2});
  f.Add(3, "b", {3});
  f.Add(4, "c", {4});
  auto failed = f.supply.Cancel("a", JobFailure::kSessionClosed, "engine went away");
  REQUIRE(Ids(failed) == std::vector<JobId>{1, 2});
  REQUIRE(failed[0].reason == "engine went away");
  REQUIRE(f.supply.Cancel("a", JobFailure::kSessionClosed, "again").empty());
  failed = f.supply.CancelAll(JobFailure::kShutdown, "shutting down");
  REQUIRE(Ids(failed) == std::vector<JobId>{3, 4});
  REQUIRE(std::none_of(failed.begin(), failed.end(), [](const JobResult& r) { return r.success; }));
  REQUIRE(f.supply.empty());
  REQUIRE_FALSE(f.supply.NextDeadline().has_value());
  f.clock.Advance(std::chrono::seconds(120));
  REQUIRE(f.supply.OnTick(f.clock.now()).empty());  // no second result
  REQUIRE(f.region->total_live_pins() == 0);
}

}  // namespace
}  // namespace kvpeer::session::testing
