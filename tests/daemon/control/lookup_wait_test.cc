// `lookup` with `wait_ms` (control-api.md, "Engine operations", the
// `lookup` row): the probe is sent at once and the answer waits until no
// key is retry, the time passes, or the peer's session or the request ends;
// requests behind it on the connection are answered after it.
#include <catch2/catch.hpp>

#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using namespace testing;
using session::ProbeAnswer;

const std::string kPeer = "node-b:5710";
const protocol::Key kA("\xaa", 1);
const protocol::Key kB("\xbb", 1);

json::object WaitLookup(json::value wait_ms, const std::string& id = "l") {
  return {{"op", "lookup"},
          {"id", id},
          {"peer", kPeer},
          {"kv_request_id", "req-1"},
          {"keys", json::array{"aa", "bb"}},
          {"wait_ms", std::move(wait_ms)}};
}

void SendLine(Client& client, const json::object& request) { client.Send(json::serialize(request) + "\n"); }

TEST_CASE("lookup wait_ms outside 0..=60000 or not an integer is bad_request naming wait_ms") {
  Daemon daemon;
  Engine engine(daemon);
  for (json::value bad : {json::value(60001), json::value(-1), json::value("5"), json::value(1.5), json::value(true)}) {
    json::object response = engine.client.Call(WaitLookup(bad));
    CHECK(ErrorCodeOf(response) == "bad_request");
    CHECK(std::string(response.at("error").at("message").as_string()).find("wait_ms") != std::string::npos);
  }
  CHECK(daemon.peers().lookups.empty());  // refused before the peer side saw anything
}

TEST_CASE("lookup wait_ms 0 is the plain lookup") {
  Daemon daemon;
  Engine engine(daemon);
  json::object response = engine.client.Call(WaitLookup(0));
  CHECK(response.at("results") == json::array{"retry", "retry"});
  REQUIRE(daemon.peers().lookups.size() == 1);
  CHECK_FALSE(daemon.peers().lookups[0].flush);
}

TEST_CASE("a waiting lookup flushes at once, wakes on answers only, and answers before what follows it") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  const auto start = std::chrono::steady_clock::now();
  SendLine(client, WaitLookup(30000));
  client.Send("{\"op\":\"status\",\"id\":\"s\"}\n");
  CHECK_FALSE(client.ReadLine(std::chrono::milliseconds(100)));  // waiting, and status waits behind it
  REQUIRE(daemon.peers().lookups.size() == 1);
  CHECK(daemon.peers().lookups[0].flush);  // the probe was sent at once

  daemon.peers().EndSession("node-c:5710");  // another peer: no wake
  daemon.peers().Answer(kPeer, kA, ProbeAnswer::kHit);
  CHECK_FALSE(client.ReadLine(std::chrono::milliseconds(100)));  // bb is still retry
  CHECK(daemon.peers().lookups.size() == 2);                     // asked again once per event, never by polling
  CHECK_FALSE(daemon.peers().lookups[1].flush);

  daemon.peers().Answer(kPeer, kB, ProbeAnswer::kMiss);
  json::object lookup = client.Response();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(lookup.at("id") == "l");
  CHECK(lookup.at("results") == json::array{"hit", "miss"});
  CHECK(client.Response().at("id") == "s");  // responses in request order
}

TEST_CASE("a waiting lookup nobody answers returns retry after wait_ms") {
  Daemon daemon;
  Engine engine(daemon);
  const auto start = std::chrono::steady_clock::now();
  json::object response = engine.client.Call(WaitLookup(150));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(150));
  CHECK(response.at("results") == json::array{"retry", "retry"});
}

TEST_CASE("a waiting lookup returns at once when the peer's session or the request ends") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  const bool session_ends = GENERATE(true, false);
  SendLine(client, WaitLookup(30000));
  CHECK_FALSE(client.ReadLine(std::chrono::milliseconds(50)));
  daemon.peers().answer_for[kA] = ProbeAnswer::kMiss;  // what the peer side answers after the end
  const auto start = std::chrono::steady_clock::now();
  if (session_ends) {
    daemon.peers().EndSession(kPeer);
  } else {
    daemon.registry().OnRequestFailed(kPeer, "req-1");
  }
  json::object response = client.Response();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(response.at("results") == json::array{"miss", "retry"});  // the plain lookup's answer then
}

TEST_CASE("a waiting lookup ends when the connection's input ends") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  SendLine(client, WaitLookup(30000));
  CHECK_FALSE(client.ReadLine(std::chrono::milliseconds(50)));
  const auto start = std::chrono::steady_clock::now();
  client.ShutdownWrite();
  json::object response = client.Response();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(response.at("results") == json::array{"retry", "retry"});
}

TEST_CASE("a lookup with wait_ms whose answers are known returns at once") {
  Daemon daemon;
  Engine engine(daemon);
  daemon.peers().answer_for[kA] = ProbeAnswer::kHit;
  daemon.peers().answer_for[kB] = ProbeAnswer::kHit;
  const auto start = std::chrono::steady_clock::now();
  CHECK(engine.client.Call(WaitLookup(30000)).at("results") == json::array{"hit", "hit"});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(daemon.peers().lookups.size() == 1);
}

}  // namespace
}  // namespace kvpeer::daemon
