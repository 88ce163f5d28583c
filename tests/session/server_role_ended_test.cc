// ServerRole::TakeEndedFetchIds and Serves (issue 11, finding 4): the
// daemon binds a request's store supply to the session whose peer fetched
// it, and drops that binding when the session no longer serves the request.
// Every way a served request ends must report it, exactly once per time it
// was served, so the daemon's table never outgrows the sessions' own
// bounded rounds and jobs.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "protocol/messages.h"
#include "tests/session/server_harness.h"

namespace kvpeer::session::testing {
namespace {

using protocol::TransferDone;
using server_test::Done;
using server_test::ServerHarness;

using Ids = std::vector<std::string>;

TEST_CASE("ended ids: an aborted fetch is reported ended at once", "[server][ended]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  CHECK(h.role->Serves("a"));
  CHECK(h.role->TakeEndedFetchIds().empty());
  h.Abort("a", 0);
  CHECK_FALSE(h.role->Serves("a"));
  CHECK(h.role->TakeNewFetchIds() == Ids{"a"});
  CHECK(h.role->TakeEndedFetchIds() == Ids{"a"});
  CHECK(h.role->TakeEndedFetchIds().empty());  // once
}

TEST_CASE("ended ids: a supplied round is reported when its transfer ends, not before", "[server][ended]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 3).ok());
  h.Store(7, "a", {1});
  h.Drain();
  CHECK(h.role->TakeEndedFetchIds().empty());  // key 2 still demanded
  h.Store(8, "a", {2});
  CHECK(h.role->TakeEndedFetchIds().empty());  // queued, not sent
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 3));
  CHECK(h.role->TakeEndedFetchIds() == Ids{"a"});
  CHECK_FALSE(h.role->Serves("a"));
}

TEST_CASE("ended ids: supply given after the end serves the request again until it times out", "[server][ended]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Abort("a", 0);
  // In the same batch the daemon bound the fetch and handed over a store
  // that was waiting: the request is served again, so the binding stays.
  h.Store(5, "a", {1});
  CHECK(h.role->Serves("a"));
  CHECK(h.role->TakeEndedFetchIds() == Ids{"a"});
  h.clock.Advance(std::chrono::seconds(60));
  h.role->OnTick();
  const auto results = h.Results();
  REQUIRE(results.size() == 1);
  CHECK_FALSE(results[0].success);
  CHECK(h.role->TakeEndedFetchIds() == Ids{"a"});
  CHECK_FALSE(h.role->Serves("a"));
}

TEST_CASE("ended ids: a later round of the same request keeps it served", "[server][ended]") {
  ServerHarness h;
  REQUIRE(h.Fetch("a", {1}, {0}, 0).ok());
  h.Abort("a", 0);
  REQUIRE(h.Fetch("a", {2}, {1}, 1).ok());
  CHECK(h.role->TakeNewFetchIds() == Ids{"a"});
  CHECK(h.role->TakeEndedFetchIds() == Ids{"a"});
  CHECK(h.role->Serves("a"));  // what the daemon checks before unbinding
  h.Abort("a", 1);
  CHECK(h.role->TakeEndedFetchIds() == Ids{"a"});
}

TEST_CASE("ended ids: the unsupplied timeout and the terminal fetch end a request", "[server][ended]") {
  ServerHarness h;
  REQUIRE(h.Fetch("late", {1}, {0}, 0).ok());
  h.clock.Advance(std::chrono::seconds(60));
  h.role->OnTick();
  REQUIRE(Done(h.All<TransferDone>().at(0), "late", false, 0));
  CHECK(h.role->TakeEndedFetchIds() == Ids{"late"});

  // A store no fetch of this round took waits unbound; the consumer's
  // terminal empty fetch fails it and ends the request.
  REQUIRE(h.Fetch("done", {1}, {0}, 1).ok());
  h.Store(9, "done", {1});
  h.Drain();
  CHECK(h.role->TakeEndedFetchIds() == Ids{"done"});
  h.Store(10, "done", {2});
  CHECK(h.role->Serves("done"));
  REQUIRE(h.TerminalFetch("done", 2).ok());
  CHECK(h.role->TakeEndedFetchIds() == Ids{"done"});
  CHECK_FALSE(h.role->Serves("done"));
}

TEST_CASE("ended ids: a request only looked up was never bound and is not reported", "[server][ended]") {
  ServerHarness h;
  h.Publish({1});
  h.Lookup("probe", {1}, 0);
  CHECK_FALSE(h.role->Serves("probe"));  // a lookup needs no supply binding
  CHECK(h.role->TrackedRequests() == 1);
  h.clock.Advance(std::chrono::seconds(30));
  h.role->OnTick();
  CHECK(h.role->TakeEndedFetchIds().empty());
}

TEST_CASE("ended ids: a lookup after the fetched round ended does not keep the binding", "[server][ended]") {
  // Found by the randomized test: the fetch's round ends and, in the same
  // batch, a new lookup round of the request opens. The daemon must unbind
  // (a lookup round needs no supply, and its end is never reported).
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("s", {1}, 0);
  REQUIRE(h.Fetch("s", {1}, {0}, 0).ok());
  CHECK(h.role->Serves("s"));
  h.Drain();
  h.Lookup("s", {2}, 1);
  CHECK(h.role->TakeEndedFetchIds() == Ids{"s"});
  CHECK_FALSE(h.role->Serves("s"));
  CHECK(h.role->TrackedRequests() == 1);
  // Its fetch binds it again and its end is reported again.
  REQUIRE(h.Fetch("s", {2}, {1}, 1).ok());
  CHECK(h.role->Serves("s"));
  h.Drain();
  CHECK(h.role->TakeEndedFetchIds() == Ids{"s"});
}

TEST_CASE("ended ids: refused fetches bind nothing; a closed role reports nothing", "[server][ended]") {
  ServerConfig config = server_test::DefaultServerConfig();
  config.max_rounds = 1;
  ServerHarness h(config);
  REQUIRE(h.Fetch("open", {1}, {0}, 0).ok());
  REQUIRE(h.Fetch("refused", {1}, {0}, 1).ok());
  CHECK(h.role->TakeNewFetchIds() == Ids{"open"});
  CHECK_FALSE(h.role->Serves("refused"));
  h.role->Close("bye");
  CHECK_FALSE(h.role->Serves("open"));
  CHECK(h.role->TakeEndedFetchIds().empty());  // the daemon drops a closed session's bindings itself
}

}  // namespace
}  // namespace kvpeer::session::testing
