// ClientRole: probing (lookup / lookup_resp), round tokens, and the checks a
// load must pass before its fetch is sent. Edge cases E8-E17
// (docs/edge-cases.md, "Finish on the consumer" and "Lookups on the
// consumer") and the matching rules of wire
// spec section 6. Loads and results: client_load_test.cc; close, pruning
// and token reuse: client_close_test.cc.
#include <catch2/catch.hpp>

#include "protocol/limits.h"
#include "tests/session/client_fixture.h"

namespace kvpeer::session::testing {
namespace {

using protocol::AbortFetch;
using protocol::Fetch;
using protocol::Lookup;

TEST_CASE("E8 finish after a flushed all-miss lookup sends one terminal empty fetch", "[client]") {
  ClientFixture f;
  const auto round = f.Probe("r1", {TestKey(1), TestKey(2)});
  f.Answer("r1", round, {TestKey(1), TestKey(2)}, {false, false});
  f.role.Finish("r1");
  auto fetches = f.log.All<Fetch>();
  REQUIRE(fetches.size() == 1);
  CHECK(fetches[0] == Fetch{"r1", {}, {}, round});
  f.role.Finish("r1");
  CHECK(f.log.Count<Fetch>() == 1);
  CHECK(f.role.TrackedRequests() == 0);
}

TEST_CASE("E9 finish with only unflushed probes sends nothing", "[client]") {
  ClientFixture f;
  f.role.RegisterLookup("r1", TestKey(1));
  f.role.Finish("r1");
  CHECK(f.log.frames.empty());
  // The cleared probe is not flushed later either.
  CHECK(f.role.FlushPendingLookups() == 0);
  CHECK(f.log.frames.empty());
  CHECK(f.role.TrackedRequests() == 0);
}

TEST_CASE("E10 finish after a real fetch sends no empty fetch", "[client]") {
  ClientFixture f;
  f.ProbeHits("r1", {TestKey(1)});
  f.Load(7, "r1", {TestKey(1)}, {3});
  f.log.Clear();
  f.role.Finish("r1");
  CHECK(f.log.Count<Fetch>() == 0);
  CHECK(f.log.Count<AbortFetch>() == 1);  // the load itself is still in flight
}

TEST_CASE("E11 finish with a load in flight and a later lookup flushed: abort then empty fetch", "[client]") {
  ClientFixture f;
  const auto first = f.ProbeHits("r1", {TestKey(1)});
  f.Load(7, "r1", {TestKey(1)}, {3});
  const auto second = f.Probe("r1", {TestKey(2)});
  REQUIRE(second > first);
  f.log.Clear();
  f.role.Finish("r1");
  REQUIRE(f.log.frames.size() == 2);
  CHECK(std::get<AbortFetch>(f.log.frames[0].message) == AbortFetch{"r1", first});
  CHECK(std::get<Fetch>(f.log.frames[1].message) == Fetch{"r1", {}, {}, second});
}

TEST_CASE("E12 a late lookup_resp of a closed round is ignored even for a re-probed key", "[client]") {
  ClientFixture f;
  const auto old_round = f.Probe("r1", {TestKey(1)});
  f.Answer("r1", old_round, {TestKey(1)}, {true});
  f.Load(7, "r1", {TestKey(1)}, {0});
  const auto new_round = f.Probe("r1", {TestKey(1)});
  REQUIRE(new_round != old_round);
  // The producer's answer to the old lookup arrives again, late.
  f.Answer("r1", old_round, {TestKey(1)}, {true});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);
  f.Answer("r1", new_round, {TestKey(1)}, {false});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kMiss);
}

TEST_CASE("E13 lookup_resp for an unknown request or unasked keys is ignored", "[client]") {
  ClientFixture f;
  f.Answer("nobody", 0, {TestKey(1)}, {true});
  CHECK(f.role.TrackedRequests() == 0);
  const auto round = f.Probe("r1", {TestKey(1)});
  f.role.RegisterLookup("r1", TestKey(2));  // registered, not yet sent
  f.Answer("r1", round, {TestKey(9), TestKey(2), TestKey(1)}, {true, true, true});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kHit);
  CHECK(f.role.RegisterLookup("r1", TestKey(2)) == ProbeAnswer::kRetry);
  CHECK(f.role.RegisterLookup("r1", TestKey(9)) == ProbeAnswer::kRetry);  // now registered, unanswered
}

TEST_CASE("E14 split and coalesced lookup responses both resolve", "[client]") {
  ClientFixture f;
  SECTION("split: one key per message") {
    const auto round = f.Probe("r1", {TestKey(1), TestKey(2), TestKey(3)});
    f.Answer("r1", round, {TestKey(2)}, {false});
    CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);
    f.Answer("r1", round, {TestKey(1)}, {true});
    f.Answer("r1", round, {TestKey(3)}, {true});
    CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kHit);
    CHECK(f.role.RegisterLookup("r1", TestKey(2)) == ProbeAnswer::kMiss);
    CHECK(f.role.RegisterLookup("r1", TestKey(3)) == ProbeAnswer::kHit);
  }
  SECTION("coalesced: two lookups answered by one message") {
    const auto round = f.Probe("r1", {TestKey(1)});
    REQUIRE(f.Probe("r1", {TestKey(2)}) == round);
    REQUIRE(f.log.Count<Lookup>() == 2);
    f.Answer("r1", round, {TestKey(1), TestKey(2)}, {true, false});
    CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kHit);
    CHECK(f.role.RegisterLookup("r1", TestKey(2)) == ProbeAnswer::kMiss);
  }
  CHECK(f.role.FlushPendingLookups() == 0);
}

TEST_CASE("E15 repeat register_lookup never resends", "[client]") {
  ClientFixture f;
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);
  CHECK(f.role.FlushPendingLookups() == 1);
  auto lookups = f.log.All<Lookup>();
  REQUIRE(lookups.size() == 1);
  CHECK(lookups[0].keys == std::vector<protocol::Key>{TestKey(1)});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);  // in flight
  CHECK(f.role.FlushPendingLookups() == 0);
  f.Answer("r1", lookups[0].round_seq, {TestKey(1)}, {true});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kHit);  // cached
  CHECK(f.role.FlushPendingLookups() == 0);
  CHECK(f.log.Count<Lookup>() == 1);
}

TEST_CASE("E16 a fetch clears probes and the next probe opens a new round", "[client]") {
  ClientFixture f;
  const auto first = f.ProbeHits("r1", {TestKey(1)});
  f.role.RegisterLookup("r1", TestKey(2));  // registered in the round the fetch closes
  const Fetch fetch = f.Load(7, "r1", {TestKey(1)}, {0});
  CHECK(fetch.round_seq == first);
  // The closed round's unsent probe went with it.
  CHECK(f.role.FlushPendingLookups() == 0);
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);
  CHECK(f.role.FlushPendingLookups() == 1);
  const Lookup again = f.log.All<Lookup>().back();
  CHECK(again.keys == std::vector<protocol::Key>{TestKey(1)});
  CHECK(again.round_seq > first);
}

TEST_CASE("E17 lookups per request, and one per step with only new keys", "[client]") {
  ClientFixture f;
  f.role.RegisterLookup("a", TestKey(1));
  f.role.RegisterLookup("b", TestKey(1));
  f.role.RegisterLookup("a", TestKey(2));
  CHECK(f.role.FlushPendingLookups() == 2);
  auto lookups = f.log.All<Lookup>();
  REQUIRE(lookups.size() == 2);
  CHECK(lookups[0].kv_request_id == "a");
  CHECK(lookups[0].keys == std::vector<protocol::Key>{TestKey(1), TestKey(2)});
  CHECK(lookups[1].kv_request_id == "b");
  CHECK(lookups[0].round_seq != lookups[1].round_seq);
  // Next step: "a" discovers one more key; only it is sent, same round.
  f.role.RegisterLookup("a", TestKey(1));
  f.role.RegisterLookup("a", TestKey(3));
  CHECK(f.role.FlushPendingLookups() == 1);
  const Lookup third = f.log.All<Lookup>().back();
  CHECK(third.keys == std::vector<protocol::Key>{TestKey(3)});
  CHECK(third.round_seq == lookups[0].round_seq);
}

TEST_CASE("spec6 round tokens come from one session-wide counter", "[client]") {
  ClientFixture f;
  const auto a = f.Probe("a", {TestKey(1)});
  const auto pd = f.PdLoad(1, "pd", {0}).round_seq;
  const auto b = f.Probe("b", {TestKey(1)});
  const auto pd2 = f.PdLoad(2, "pd", {1}).round_seq;
  CHECK(a == 0);
  CHECK(pd == 1);
  CHECK(b == 2);
  CHECK(pd2 == 3);
  // A symmetric fetch carries its open round; no new token is taken.
  f.Answer("a", a, {TestKey(1)}, {true});
  CHECK(f.Load(3, "a", {TestKey(1)}, {2}).round_seq == a);
  CHECK(f.Probe("c", {TestKey(1)}) == 4);
}

TEST_CASE("spec6 lookup_resp applies only to the open round", "[client]") {
  ClientFixture f;
  const auto round = f.Probe("r1", {TestKey(1)});
  f.Answer("r1", round + 1, {TestKey(1)}, {true});  // a token that is not this request's round
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kRetry);
  f.Answer("r1", round, {TestKey(1)}, {true});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kHit);
  // The first answer stands: the engine may already have acted on it.
  f.Answer("r1", round, {TestKey(1)}, {false});
  CHECK(f.role.RegisterLookup("r1", TestKey(1)) == ProbeAnswer::kHit);
}

TEST_CASE("spec6 a symmetric load may only name confirmed hits of the open round", "[client]") {
  ClientFixture f;
  const auto round = f.Probe("r1", {TestKey(1), TestKey(2), TestKey(3)});
  f.Answer("r1", round, {TestKey(1), TestKey(2)}, {true, false});
  JobId job = 0;
  auto try_load = [&](std::vector<protocol::Key> keys) {
    std::vector<protocol::SlotIndex> indexes;
    for (size_t i = 0; i < keys.size(); ++i) indexes.push_back(static_cast<protocol::SlotIndex>(i));
    return f.role.RequestBlocks(++job, "r1", std::move(keys), std::move(indexes), f.region->Sink());
  };
  for (int bad : {2, 3, 4}) {  // a miss, an unanswered probe, a key never probed
    Status s = try_load({TestKey(1), TestKey(bad)});
    CHECK(s.code() == Status::Code::kInvalid);
    CHECK_THAT(s.message(), Catch::Contains("is not a confirmed hit of round " + std::to_string(round)));
  }
  CHECK(f.log.Count<Fetch>() == 0);
  CHECK(f.role.LoadsInFlight() == 0);
  REQUIRE(try_load({TestKey(1)}).ok());
  // The round is closed: the same hit is no longer confirmed, the request
  // stays symmetric and must probe again.
  Status s = try_load({TestKey(1)});
  CHECK(s.code() == Status::Code::kInvalid);
  CHECK_THAT(s.message(), Catch::Contains("no open lookup round"));
  CHECK(f.log.Count<Fetch>() == 1);
  CHECK(f.role.TakeResults().empty());
}

TEST_CASE("spec6 a request that never probed loads without probe checks (PD)", "[client]") {
  ClientFixture f;
  const Fetch fetch = f.PdLoad(1, "pd", {4, 5});
  CHECK(fetch.keys == std::vector<protocol::Key>{TestKey(104), TestKey(105)});
  CHECK(fetch.block_indexes == std::vector<protocol::SlotIndex>{4, 5});
  // Probing elsewhere does not make this request symmetric.
  f.Probe("other", {TestKey(1)});
  CHECK(f.PdLoad(2, "pd", {6}).round_seq > fetch.round_seq);
}

TEST_CASE("spec6 malformed loads are rejected with nothing sent and no result owed", "[client]") {
  ClientFixture f;
  f.PdLoad(5, "busy", {9});
  f.log.Clear();
  auto request = [&](JobId job, std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> indexes,
                     SlotSinkRef sink) {
    return f.role.RequestBlocks(job, "r1", std::move(keys), std::move(indexes), std::move(sink));
  };
  const auto sink = f.region->Sink();
  std::vector<Status> rejected = {
      request(1, {TestKey(1), TestKey(2)}, {0}, sink),                  // lengths differ
      request(1, {}, {}, sink),                                         // empty
      request(1, {TestKey(1), TestKey(2)}, {3, 3}, sink),               // index used twice
      request(5, {TestKey(1)}, {0}, sink),                              // job 5 already in flight
      request(1, {TestKey(1)}, {0}, nullptr),                           // nowhere to write
      request(1, {std::string()}, {0}, sink),                           // a key the wire cannot carry
      request(1, {TestKey(1)}, {protocol::SlotIndex{1u << 31}}, sink),  // index out of range
  };
  for (const Status& s : rejected) {
    CHECK(s.code() == Status::Code::kInvalid);
    CHECK_FALSE(s.message().empty());
  }
  CHECK_THAT(rejected[0].message(), Catch::Contains("differ in length: 2 vs 1"));
  CHECK_THAT(rejected[2].message(), Catch::Contains("destination index 3 appears twice"));
  CHECK_THAT(rejected[3].message(), Catch::Contains("job id 5 is already in flight"));
  CHECK(f.log.frames.empty());
  CHECK(f.role.LoadsInFlight() == 1);
  CHECK(f.role.TrackedRequests() == 1);  // only "busy"; rejected loads leave no state
  CHECK(f.role.TakeResults().empty());
}

TEST_CASE("spec6 a probe that cannot travel on the wire answers miss", "[client]") {
  ClientFixture f;
  CHECK(f.role.RegisterLookup("r1", std::string()) == ProbeAnswer::kMiss);
  CHECK(f.role.RegisterLookup(std::string(), TestKey(1)) == ProbeAnswer::kMiss);
  CHECK(f.role.FlushPendingLookups() == 0);
  CHECK(f.role.TrackedRequests() == 0);
}

}  // namespace
}  // namespace kvpeer::session::testing

namespace kvpeer::session::testing {
namespace {

// RegisterLookups is RegisterLookup of each key in order: the same answers
// (repeats, a key too long to ask, answered and unanswered probes) and the
// same frames on the next flush.
TEST_CASE("RegisterLookups answers as RegisterLookup key by key would", "[client]") {
  const protocol::Key too_long(protocol::kMaxKeyBytes + 1, 'x');
  ClientFixture batch, single;
  for (ClientFixture* f : {&batch, &single}) {
    const auto round = f->Probe("r1", {TestKey(1), TestKey(2), TestKey(3)});
    f->Answer("r1", round, {TestKey(1), TestKey(2)}, {true, false});  // 3 stays unanswered
  }
  const std::vector<protocol::Key> keys = {TestKey(1), TestKey(2), TestKey(3), TestKey(4),
                                           TestKey(4), too_long,   {},         TestKey(5)};
  std::vector<ProbeAnswer> answers = {ProbeAnswer::kHit};  // appended to, not replaced
  batch.role.RegisterLookups("r1", keys, &answers);
  std::vector<ProbeAnswer> expected = {ProbeAnswer::kHit};
  for (const protocol::Key& key : keys) expected.push_back(single.role.RegisterLookup("r1", key));
  CHECK(answers == expected);
  CHECK(answers[1] == ProbeAnswer::kHit);
  CHECK(answers[2] == ProbeAnswer::kMiss);
  CHECK(answers[4] == ProbeAnswer::kRetry);
  batch.log.Clear();
  single.log.Clear();
  CHECK(batch.role.FlushPendingLookups() == single.role.FlushPendingLookups());
  CHECK(batch.log.All<protocol::Lookup>() == single.log.All<protocol::Lookup>());

  std::vector<ProbeAnswer> none;
  batch.role.RegisterLookups("", {TestKey(1)}, &none);  // an id that cannot be asked: miss, nothing queued
  CHECK(none == std::vector<ProbeAnswer>{ProbeAnswer::kMiss});
  CHECK(batch.role.FlushPendingLookups() == 0);
}

}  // namespace
}  // namespace kvpeer::session::testing
