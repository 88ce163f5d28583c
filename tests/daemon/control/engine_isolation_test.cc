// No request of one engine changes another engine's keys or requests
// (control API spec sections 1 and 2; docs/security.md, "Control socket and
// engines"): keys held by several engines,
// and store supply owned by its engine.
#include <catch2/catch.hpp>

#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using testing::Daemon;
using testing::Engine;
using testing::ErrorCodeOf;
namespace json = boost::json;

const std::string kKey = "00112233445566778899aabbccddeeff";

json::object Store(int64_t job_id, const std::string& kv_request_id) {
  return {{"op", "store"},
          {"job_id", job_id},
          {"kv_request_id", kv_request_id},
          {"keys", json::array{kKey}},
          {"block_ids", json::array{1}}};
}

TEST_CASE("two engines publishing one key both hold it; each unpublish withdraws only its own") {
  Daemon daemon;
  Engine first(daemon, "engine-1");
  Engine second(daemon, "engine-2");
  json::object publish{{"op", "publish"}, {"keys", json::array{kKey}}, {"block_ids", json::array{2}}};
  REQUIRE(first.client.Call(publish).at("ok") == true);
  publish["block_ids"] = json::array{5};
  REQUIRE(second.client.Call(publish).at("ok") == true);

  json::object unpublished = first.client.Call({{"op", "unpublish"}, {"keys", json::array{kKey}}});
  CHECK(unpublished.at("released") == json::array{2});
  // The second engine still holds it, and heard of nothing.
  json::object poll = second.client.Call({{"op", "poll"}});
  CHECK(poll.at("released").as_array().empty());
  CHECK(daemon.index().size() == 1);
  json::object second_unpublished = second.client.Call({{"op", "unpublish"}, {"keys", json::array{kKey}}});
  CHECK(second_unpublished.at("released") == json::array{5});
  // Nor did the first engine hear of the second's slot.
  CHECK(first.client.Call({{"op", "poll"}}).at("released").as_array().empty());
}

TEST_CASE("store supply is its engine's: another engine's store is conflict, its finish changes nothing") {
  Daemon daemon;
  Engine first(daemon, "engine-1");
  Engine second(daemon, "engine-2");
  REQUIRE(first.client.Call(Store(1, "req-1")).at("ok") == true);
  json::object refused = second.client.Call(Store(1, "req-1"));
  CHECK(ErrorCodeOf(refused) == "conflict");
  CHECK_THAT(std::string(refused.at("error").at("message").as_string()), Catch::Contains("another engine"));
  CHECK(daemon.peers().stores.size() == 1);

  // The second engine's finish does not end the first engine's supply.
  REQUIRE(second.client.Call({{"op", "finish"}, {"kv_request_id", "req-1"}}).at("ok") == true);
  REQUIRE(daemon.peers().finished_as_producer.size() == 1);
  CHECK(daemon.peers().finished_as_producer.back() == false);
  // The owner's own finish does, and frees the id for others.
  REQUIRE(first.client.Call({{"op", "finish"}, {"kv_request_id", "req-1"}}).at("ok") == true);
  CHECK(daemon.peers().finished_as_producer.back() == true);
  CHECK(second.client.Call(Store(2, "req-1")).at("ok") == true);
}

TEST_CASE("an engine's exit gives up its supply claims") {
  Daemon daemon;
  Engine second(daemon, "engine-2");
  {
    Engine first(daemon, "engine-1");
    REQUIRE(first.client.Call(Store(1, "req-9")).at("ok") == true);
  }
  json::object stored;
  for (int i = 0; i < 50; ++i) {
    daemon.Pump(std::chrono::milliseconds(5));
    if (!daemon.registry().SupplyOwner("req-9")) break;
  }
  CHECK(second.client.Call(Store(1, "req-9")).at("ok") == true);
}

}  // namespace
}  // namespace kvpeer::daemon
