// An engine going away (control-api.md section 2): its requests are
// finished, its keys withdrawn, its jobs end, its region stays mapped only
// while something still touches it; nothing of another engine changes.
#include <catch2/catch.hpp>

#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using namespace testing;

json::object LoadRequest(int64_t job_id, const std::string& kv, protocol::SlotIndex slot) {
  return {{"op", "load"},        {"job_id", job_id},          {"peer", "node-b:5710"},
          {"kv_request_id", kv}, {"keys", json::array{"aa"}}, {"block_ids", json::array{slot}}};
}

TEST_CASE("an engine's disconnect finishes its requests, withdraws its keys and ends its jobs") {
  Daemon daemon;
  auto engine = std::make_unique<Engine>(daemon);
  Engine other(daemon, "engine-2");
  Client& client = engine->client;
  REQUIRE(
      client.Call({{"op", "publish"}, {"keys", json::array{"a1", "a2"}}, {"block_ids", json::array{1, 2}}}).at("ok") ==
      true);
  REQUIRE(other.client.Call({{"op", "publish"}, {"keys", json::array{"b1"}}, {"block_ids", json::array{1}}}).at("ok") ==
          true);
  REQUIRE(client.Call(LoadRequest(1, "req-load", 4)).at("ok") == true);
  REQUIRE(client
              .Call({{"op", "store"},
                     {"job_id", 2},
                     {"kv_request_id", "req-store"},
                     {"keys", json::array{"a1"}},
                     {"block_ids", json::array{1}}})
              .at("ok") == true);
  REQUIRE(
      client
          .Call(
              {{"op", "lookup"}, {"peer", "node-b:5710"}, {"kv_request_id", "req-probe"}, {"keys", json::array{"cc"}}})
          .at("ok") == true);
  // A peer's frame still reads slot 2; the store's pin reads slot 1.
  session::PinRef reading = daemon.index().PinIfPublished(std::string("\xa2", 1));
  REQUIRE(reading);
  engine->region.Write(2 * kBlockLen, std::string(kBlockLen, 'r'));

  client.Close();
  for (int i = 0; i < 50 && daemon.registry().engine_count() > 1; ++i) daemon.Pump(std::chrono::milliseconds(2));

  CHECK(daemon.registry().engine_count() == 1);
  std::vector<std::string> finished = daemon.peers().finished;
  std::sort(finished.begin(), finished.end());
  CHECK(finished == std::vector<std::string>{"req-load", "req-probe", "req-store"});
  CHECK(daemon.peers().loads.empty());  // the in-flight load ended
  CHECK(daemon.index().PinIfPublished(std::string("\xa1", 1)) == nullptr);
  CHECK(daemon.index().PinIfPublished(std::string("\xb1", 1)) != nullptr);  // the other engine's key stays
  CHECK(daemon.index().size() == 1);
  // Still mapped for the pins that read it.
  CHECK(std::string(reinterpret_cast<const char*>(reading->bytes().data()), kBlockLen) == std::string(kBlockLen, 'r'));
  reading.reset();
  daemon.peers().stores.clear();
  // Late results for the gone engine are dropped, not misrouted.
  CHECK(other.client.Call({{"op", "poll"}}).at("results").as_array().empty());

  // The request ids are free for other engines now.
  CHECK(other.client.Call(LoadRequest(1, "req-load", 4)).at("ok") == true);
  json::object status = other.client.Call({{"op", "status"}});
  REQUIRE(status.at("engines").as_array().size() == 1);
  CHECK(status.at("engines").at(0).at("client") == "engine-2");
}

TEST_CASE("input ended during a long poll: the poll returns at once and the session closes") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  const auto start = std::chrono::steady_clock::now();
  client.Send("{\"op\":\"poll\",\"wait_ms\":60000,\"id\":1}\n");
  daemon.Pump(std::chrono::milliseconds(20));
  client.ShutdownWrite();
  json::object poll = client.Response();  // a half-closed client still gets its answer
  CHECK(poll.at("id") == 1);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(client.WaitClosed());
  CHECK(daemon.registry().engine_count() == 0);
}

TEST_CASE("requests sent before a half-close are all answered") {
  Daemon daemon;
  Client client(daemon);
  client.Send("{\"op\":\"status\",\"id\":1}\n{\"op\":\"status\",\"id\":2}\n");
  client.ShutdownWrite();
  CHECK(client.Response().at("id") == 1);
  CHECK(client.Response().at("id") == 2);
  CHECK(client.WaitClosed());
}

TEST_CASE("a bad request from one engine does not affect another") {
  Daemon daemon;
  Engine a(daemon, "a");
  Engine b(daemon, "b");
  REQUIRE(b.client.Call({{"op", "publish"}, {"keys", json::array{"bb"}}, {"block_ids", json::array{0}}}).at("ok") ==
          true);
  a.client.Send("not json at all\n");
  CHECK(ErrorCodeOf(a.client.Response()) == "bad_request");
  CHECK(b.client.Call({{"op", "unpublish"}, {"keys", json::array{"bb"}}}).at("released") == json::array{0});
}

}  // namespace
}  // namespace kvpeer::daemon
