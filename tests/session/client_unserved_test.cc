// ClientRole::TakeUnservedWork: what a session closed in favour of another
// connection to the same peer hands back instead of failing
// (docs/wire-protocol.md, section 9, "(f) Work on a superseded connection").
#include <catch2/catch.hpp>

#include "tests/session/client_fixture.h"

namespace kvpeer::session::testing {
namespace {

TEST_CASE("unserved work: a disaggregated load nothing answered is handed back whole, without a result",
          "[client][unserved]") {
  ClientFixture f;
  f.PdLoad(7, "pd", {3, 1, 2});
  const UnservedWork work = f.role.TakeUnservedWork();
  REQUIRE(work.loads.size() == 1);
  const UnservedLoad& load = work.loads[0];
  CHECK(load.job_id == 7);
  CHECK(load.kv_request_id == "pd");
  CHECK(load.keys == std::vector<protocol::Key>{TestKey(103), TestKey(101), TestKey(102)});
  CHECK(load.block_indexes == std::vector<protocol::SlotIndex>{3, 1, 2});  // the load's own order
  CHECK(load.sink != nullptr);
  CHECK(work.probes.empty());
  // It left the role: no result now, none at close, nothing tracked.
  CHECK(f.role.LoadsInFlight() == 0);
  CHECK_FALSE(f.role.NextDeadline());
  const ClientCloseResult closed = f.role.Close("duplicate");
  CHECK(closed.failed_loads.empty());
  CHECK(closed.failed_request_ids.empty());
  CHECK(f.role.TakeResults().empty());
  // The same job id may be asked again (here: on this role, as a stand-in
  // for the replacement connection's role) without "already in flight".
  ClientFixture replacement;
  CHECK(replacement.role.RequestBlocks(load.job_id, load.kv_request_id, load.keys, load.block_indexes, load.sink).ok());
}

TEST_CASE("unserved work: a load with a block landed or landing stays and fails at close", "[client][unserved]") {
  ClientFixture f;
  const auto landed = f.PdLoad(1, "landed", {0, 1}).round_seq;
  const auto landing = f.PdLoad(2, "landing", {2}).round_seq;
  f.PdLoad(3, "untouched", {4});
  REQUIRE(f.Deliver("landed", landed, {0}).ok());
  REQUIRE(f.Header("landing", landing, {2}).ok());  // its payload is arriving into slot 2
  const UnservedWork work = f.role.TakeUnservedWork();
  REQUIRE(work.loads.size() == 1);
  CHECK(work.loads[0].job_id == 3);
  const ClientCloseResult closed = f.role.Close("duplicate");
  REQUIRE(closed.failed_loads.size() == 2);
  CHECK(ResultText(closed.failed_loads[0]) == "job 1 landed failed: duplicate");
  CHECK(ResultText(closed.failed_loads[1]) == "job 2 landing failed: duplicate");
}

TEST_CASE("unserved work: an aborted load is not handed back (its result was reported)", "[client][unserved]") {
  ClientFixture f;
  f.PdLoad(1, "aborted", {0});
  f.role.Finish("aborted");
  CHECK(f.role.TakeUnservedWork().empty());
  auto results = f.role.TakeResults();
  REQUIRE(results.size() == 1);
  CHECK(ResultText(results[0]) == "job 1 aborted failed: request finished");
}

TEST_CASE("unserved work: unanswered probes are handed back; a request with a hit or a load is not",
          "[client][unserved]") {
  ClientFixture f;
  f.Probe("waiting", {TestKey(1), TestKey(2)});  // sent, unanswered
  f.role.RegisterLookup("unsent", TestKey(3));   // not flushed yet
  const auto mixed = f.Probe("mixed", {TestKey(4), TestKey(5)});
  f.Answer("mixed", mixed, {TestKey(4)}, {true});  // one hit, one still unanswered
  f.ProbeHits("loading", {TestKey(6)});
  f.Load(9, "loading", {TestKey(6)}, {6});
  const UnservedWork work = f.role.TakeUnservedWork();
  CHECK(work.loads.empty());  // a symmetric load's hits were pinned for this connection's round
  REQUIRE(work.probes.size() == 2);
  std::map<std::string, std::vector<protocol::Key>> probes;
  for (const auto& p : work.probes) {
    auto keys = p.keys;
    std::sort(keys.begin(), keys.end());
    probes[p.kv_request_id] = keys;
  }
  CHECK(probes["waiting"] == std::vector<protocol::Key>{TestKey(1), TestKey(2)});
  CHECK(probes["unsent"] == std::vector<protocol::Key>{TestKey(3)});
  // The handed-back requests owe the engine nothing here any more; the
  // others fail with the session as before.
  const ClientCloseResult closed = f.role.Close("duplicate");
  CHECK(closed.failed_request_ids == std::vector<std::string>{"loading", "mixed"});
  REQUIRE(closed.failed_loads.size() == 1);
  CHECK(closed.failed_loads[0].job_id == 9);
}

TEST_CASE("unserved work: nothing is handed back once the role is closed", "[client][unserved]") {
  ClientFixture f;
  f.PdLoad(1, "pd", {0});
  f.role.Close("connection lost");
  CHECK(f.role.TakeUnservedWork().empty());
}

}  // namespace
}  // namespace kvpeer::session::testing
