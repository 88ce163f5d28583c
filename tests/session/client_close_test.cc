// ClientRole: session close, pruning, and round tokens across pruning (E56).
//
// Client edge cases (docs/edge-cases.md) and where they are tested:
// * E1-E7, E18, E19: client_load_test.cc; E8-E17: client_lookup_test.cc;
//   E56: here.
// * E5's hardened variant (resend abort forever, never fail locally) is not
//   our design: wire spec section 6 fails the load when abort_fetch is sent
//   and retires the round after the abort-ack timeout; E5 tests that.
// * E6 is decided as "fail at once" (spec section 6); see its test.
// * E20 (frames queued before connect_ack, flushed in order) does not apply
//   to ClientRole: gating is PeerSession's, the role just calls SendFn. It
//   belongs to the peer session tests.
// * E21-E55 and E57-E70 concern the server role, the session or the
//   transport, not the client role.
#include <catch2/catch.hpp>

#include "protocol/limits.h"
#include "tests/session/client_fixture.h"

namespace kvpeer::session::testing {
namespace {

using namespace std::chrono_literals;
using protocol::Fetch;
using protocol::Lookup;

TEST_CASE("E56 a round token is never reused, even after the request was pruned", "[client]") {
  ClientFixture f;
  const auto first = f.ProbeHits("r1", {TestKey(1)});
  f.Load(1, "r1", {TestKey(1)}, {0});
  f.role.Finish("r1");
  REQUIRE(f.Ack("r1", first).ok());
  f.role.TakeResults();
  REQUIRE(f.role.TrackedRequests() == 0);
  // The same request id comes back: a fresh token, not round 0 again.
  const auto second = f.Probe("r1", {TestKey(1)});
  CHECK(second > first);
  // A late artefact of the old round cannot touch the new one.
  f.Answer("r1", first, {TestKey(1)}, {true});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);
  CHECK(f.Header("r1", first, {0}).code() == Status::Code::kViolation);
  const auto pd = f.PdLoad(2, "pd", {1}).round_seq;
  f.role.Finish("pd");
  f.role.OnTick();
  CHECK(f.PdLoad(3, "pd", {1}).round_seq > pd);
}

TEST_CASE("client close fails every load without a result, each exactly once", "[client]") {
  ClientFixture f;
  const auto done = f.PdLoad(1, "done", {0}).round_seq;
  f.PdLoad(2, "aborted", {1});
  const auto receiving = f.PdLoad(3, "receiving", {2}).round_seq;
  f.PdLoad(4, "flying", {3});
  REQUIRE(f.Deliver("done", done, {0}).ok());
  REQUIRE(f.Done("done", done).ok());
  f.role.Finish("aborted");
  REQUIRE(f.Header("receiving", receiving, {2}).ok());
  f.role.Finish("receiving");  // its result waits for the payload, which never lands
  const ClientCloseResult closed = f.role.Close("connection lost");
  REQUIRE(closed.failed_loads.size() == 2);
  CHECK(ResultText(closed.failed_loads[0]) == "job 3 receiving failed: connection lost");
  CHECK(ResultText(closed.failed_loads[1]) == "job 4 flying failed: connection lost");
  // Results produced before the close are still handed out, once.
  auto earlier = f.role.TakeResults();
  REQUIRE(earlier.size() == 2);
  CHECK(ResultText(earlier[0]) == "job 1 done ok");
  CHECK(ResultText(earlier[1]) == "job 2 aborted failed: request finished");
  CHECK(f.role.TakeResults().empty());
  const ClientCloseResult again = f.role.Close("twice");
  CHECK(again.failed_loads.empty());
  CHECK(again.failed_request_ids.empty());
  CHECK(f.role.LoadsInFlight() == 0);
  CHECK_FALSE(f.role.HasActiveLoads());
  CHECK(f.role.TrackedRequests() == 0);
  CHECK_FALSE(f.role.NextDeadline());
}

TEST_CASE("client close reports requests with a load in flight, an unresolved probe or unloaded hits", "[client]") {
  ClientFixture f;
  f.PdLoad(1, "loading", {0});
  f.Probe("asked", {TestKey(1)});  // sent, unanswered
  const auto round = f.Probe("answered", {TestKey(1)});
  f.Answer("answered", round, {TestKey(1)}, {false});  // resolved as a miss: nothing owed
  const auto hit_round = f.Probe("hit", {TestKey(1), TestKey(2)});
  f.Answer("hit", hit_round, {TestKey(1), TestKey(2)}, {false, true});  // its pinned hit dies with the session
  f.role.RegisterLookup("registered", TestKey(1));                      // not even sent
  f.PdLoad(2, "aborted", {1});
  f.role.Finish("aborted");  // already failed
  const ClientCloseResult closed = f.role.Close("bye");
  CHECK(closed.failed_request_ids == std::vector<std::string>{"asked", "hit", "loading", "registered"});
}

TEST_CASE("client after close: nothing is sent and nothing is accepted", "[client]") {
  ClientFixture f;
  const auto round = f.PdLoad(1, "r1", {0}).round_seq;
  f.role.Close("bye");
  f.log.Clear();
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kMiss);
  CHECK(f.role.FlushPendingLookups() == 0);
  CHECK(f.role.RequestBlocks(2, "r1", {TestKey(1)}, {0}, f.region->Sink()).code() == Status::Code::kUnavailable);
  CHECK_FALSE(f.Header("r1", round, {0}).ok());
  CHECK(f.Done("r1", round).ok());
  f.role.Finish("r1");
  f.clock.Advance(1h);
  f.role.OnTick();
  CHECK(f.log.frames.empty());
  CHECK(f.role.TakeResults().empty());
  CHECK(f.role.TrackedRequests() == 0);
}

TEST_CASE("client state is pruned once every request has finished", "[client]") {
  ClientFixture f;
  // A symmetric request: one round served, the next timed out, a third probed.
  const auto r0 = f.ProbeHits("sym", {TestKey(1), TestKey(2)});
  f.Load(1, "sym", {TestKey(1), TestKey(2)}, {0, 1});
  REQUIRE(f.Deliver("sym", r0, {0, 1}).ok());
  REQUIRE(f.Done("sym", r0).ok());
  const auto r1 = f.ProbeHits("sym", {TestKey(3)});
  f.Load(2, "sym", {TestKey(3)}, {2});
  f.Probe("sym", {TestKey(4)});
  // A PD request timed out; a probe-only request; an unflushed probe.
  f.PdLoad(3, "pd", {5});
  f.Probe("probe-only", {TestKey(1)});
  f.role.RegisterLookup("unflushed", TestKey(1));
  CHECK(f.role.TrackedRequests() == 4);
  f.clock.Advance(30s);
  f.role.OnTick();
  for (const char* kv : {"sym", "pd", "probe-only", "unflushed"}) f.role.Finish(kv);
  CHECK(f.role.TrackedRequests() == 2);  // "sym" and "pd" await abort_ack
  REQUIRE(f.Ack("sym", r1).ok());
  f.clock.Advance(10s);
  f.role.OnTick();  // "pd": the abort-ack timeout retires it
  CHECK(f.role.TrackedRequests() == 0);
  CHECK_FALSE(f.role.HasActiveLoads());
  CHECK(f.role.LoadsInFlight() == 0);
  CHECK_FALSE(f.role.NextDeadline());
  CHECK(f.role.FlushPendingLookups() == 0);
  CHECK(f.role.TakeResults().size() == 3);
}

TEST_CASE("client a symmetric request stays symmetric until it finishes", "[client]") {
  ClientFixture f;
  const auto round = f.ProbeHits("r1", {TestKey(1)});
  f.Load(1, "r1", {TestKey(1)}, {0});
  REQUIRE(f.Deliver("r1", round, {0}).ok());
  REQUIRE(f.Done("r1", round).ok());
  // Idle, but a load without probing must still be refused.
  CHECK(f.role.TrackedRequests() == 1);
  CHECK(f.role.RequestBlocks(2, "r1", {TestKey(1)}, {1}, f.region->Sink()).code() == Status::Code::kInvalid);
  f.role.Finish("r1");
  CHECK(f.log.Count<Fetch>() == 1);  // no terminal fetch: the round was closed by the real one
  CHECK(f.role.TrackedRequests() == 0);
  // After finish the id is new to us: a PD load is fine.
  CHECK(f.role.RequestBlocks(2, "r1", {TestKey(1)}, {1}, f.region->Sink()).ok());
}

TEST_CASE("client a lookup larger than one message's list limit is split", "[client]") {
  ClientFixture f;
  const size_t n = protocol::kMaxListItems + 3;
  for (size_t i = 0; i < n; ++i) f.role.RegisterLookup("big", TestKey(static_cast<int>(i)));
  CHECK(f.role.FlushPendingLookups() == 2);
  auto lookups = f.log.All<Lookup>();
  REQUIRE(lookups.size() == 2);
  CHECK(lookups[0].keys.size() == protocol::kMaxListItems);
  CHECK(lookups[1].keys.size() == 3);
  CHECK(lookups[1].keys.back() == TestKey(static_cast<int>(n - 1)));
  CHECK(lookups[0].round_seq == lookups[1].round_seq);
}

}  // namespace
}  // namespace kvpeer::session::testing
