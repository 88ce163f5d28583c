// The session-side halves of kvpeerd's limits: ServerConfig::max_rounds (the
// daemon's --max-rounds-per-peer) and ClientRole::ProbesWith (what the
// daemon checks --max-pending-lookups against). A limit refuses work with an
// ordinary answer (all-miss, transfer_done{success:false}); it is never a
// protocol violation and never touches rounds already open.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/session/client_fixture.h"
#include "tests/session/server_harness.h"

namespace kvpeer::session::testing {
namespace {

using protocol::LookupResp;
using protocol::TransferDone;
using server_test::Done;
using server_test::ServerHarness;

ServerConfig MaxRounds(size_t max_rounds) {
  ServerConfig config = server_test::DefaultServerConfig();
  config.max_rounds = max_rounds;
  return config;
}

TEST_CASE("max_rounds: a lookup that would open one round too many answers all-miss and pins nothing",
          "[server][limits]") {
  ServerHarness h(MaxRounds(2));
  h.Publish({1, 2, 3});
  h.Lookup("a", {1}, 0);
  h.Lookup("b", {2}, 1);
  REQUIRE(h.role->RoundsOpen() == 2);
  REQUIRE(h.region->total_live_pins() == 2);

  h.Lookup("c", {3, 1}, 2);  // a third round: refused
  const LookupResp refused = h.All<LookupResp>().at(2);
  CHECK(refused.kv_request_id == "c");
  CHECK(refused.round_seq == 2);
  CHECK(refused.keys == server_test::Keys({3, 1}));
  CHECK(refused.hits == std::vector<bool>{false, false});
  CHECK(h.role->RoundsOpen() == 2);
  CHECK(h.role->RoundsRefused() == 1);
  CHECK(h.region->live_pins(3) == 0);
  CHECK(h.role->TrackedRequests() == 2);  // nothing remembered for "c"

  // A round already open still takes more lookups at the limit.
  h.Lookup("a", {2}, 0);
  CHECK(h.All<LookupResp>().at(3).hits == std::vector<bool>{true});
  CHECK(h.role->RoundsRefused() == 1);

  // Once a round ends there is room again.
  REQUIRE(h.TerminalFetch("b", 1).ok());
  CHECK(h.role->RoundsOpen() == 1);
  h.Lookup("c", {3}, 3);
  CHECK(h.All<LookupResp>().back().hits == std::vector<bool>{true});
  CHECK(h.role->RoundsOpen() == 2);
}

TEST_CASE("max_rounds: a fetch that would open a round gets transfer_done{success:false}; open rounds are served",
          "[server][limits]") {
  ServerHarness h(MaxRounds(1));
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 0);
  REQUIRE(h.role->RoundsOpen() == 1);

  // Disaggregated prefill fetch of another request: a new round, refused.
  REQUIRE(h.Fetch("pd", {5}, {0}, 1).ok());
  REQUIRE(h.All<TransferDone>().size() == 1);
  CHECK(Done(h.All<TransferDone>().at(0), "pd", false, 1));
  CHECK(h.role->RoundsRefused() == 1);
  CHECK(h.role->TakeNewFetchIds().empty());  // no supply is bound to a refused fetch
  CHECK(h.role->RoundsOpen() == 1);

  // The symmetric fetch of the open round is served as usual.
  REQUIRE(h.Fetch("a", {1, 2}, {4, 5}, 0).ok());
  h.Drain();
  REQUIRE(h.All<TransferDone>().size() == 2);
  CHECK(Done(h.All<TransferDone>().at(1), "a", true, 0));
  CHECK(h.Received("a", 0).size() == 2);
  CHECK(h.role->RoundsOpen() == 0);
  CHECK(h.role->RoundsRefused() == 1);

  // A store for a refused request stays unbound (it times out as usual).
  h.Store(7, "pd", {1});
  CHECK(h.Results().empty());
}

TEST_CASE("max_rounds: open-round accounting follows every way a round ends", "[server][limits]") {
  ServerHarness h(MaxRounds(3));
  h.Publish({1, 2, 3});
  h.Lookup("a", {1}, 0);                    // lookup-only, ended by the terminal fetch
  h.Lookup("b", {2}, 1);                    // ended by abort
  REQUIRE(h.Fetch("c", {3}, {0}, 2).ok());  // PD round, ended by close
  CHECK(h.role->RoundsOpen() == 3);
  CHECK(h.role->RoundsServing() == 1);
  REQUIRE(h.TerminalFetch("a", 0).ok());
  CHECK(h.role->RoundsOpen() == 2);
  h.Abort("b", 1);
  CHECK(h.role->RoundsOpen() == 1);
  h.role->Close("test");
  CHECK(h.role->RoundsOpen() == 0);
}

TEST_CASE("max_rounds 0 means no limit", "[server][limits]") {
  ServerHarness h(MaxRounds(0));
  h.Publish({1});
  for (int i = 0; i < 100; ++i) h.Lookup("r" + std::to_string(i), {1}, static_cast<protocol::RoundSeq>(i));
  CHECK(h.role->RoundsOpen() == 100);
  CHECK(h.role->RoundsRefused() == 0);
}

TEST_CASE("ProbesWith counts the open round's distinct probes after the keys, changing nothing", "[client][limits]") {
  ClientFixture f;
  CHECK(f.role.ProbesWith("r1", {TestKey(1), TestKey(2), TestKey(1)}) == 2);
  f.role.RegisterLookup("r1", TestKey(1));
  f.role.RegisterLookup("r1", TestKey(2));
  CHECK(f.role.ProbesWith("r1", {}) == 2);
  CHECK(f.role.ProbesWith("r1", {TestKey(1), TestKey(2)}) == 2);  // asking again adds nothing
  CHECK(f.role.ProbesWith("r1", {TestKey(2), TestKey(3), TestKey(3)}) == 3);
  CHECK(f.role.ProbesWith("r2", {TestKey(1)}) == 1);  // per request
  CHECK(f.log.frames.empty());
  CHECK(f.role.ProbesWith("r1", {}) == 2);

  // A fetch closes the round: the next probes start a fresh one.
  const auto round = f.Probe("r1", {TestKey(1), TestKey(2)});
  f.Answer("r1", round, {TestKey(1), TestKey(2)}, {true, true});
  f.Load(1, "r1", {TestKey(1)}, {0});
  CHECK(f.role.ProbesWith("r1", {TestKey(1)}) == 1);
}

}  // namespace
}  // namespace kvpeer::session::testing
