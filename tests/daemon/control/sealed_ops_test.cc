// Sealed publish and store (control-api.md `publish` `seal`; docs/security.md,
// "One request may not hold the event loop"): the slots are hashed once
// each on the SealHasher's worker thread and the request is answered after,
// in order with the connection's other requests. Runs under ThreadSanitizer
// in CI (daemon_control_tests), which is what checks the hand-over between
// the worker and the event loop.
#include <catch2/catch.hpp>

#include "protocol/block_checksum.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using namespace testing;

json::object SealedPublish(json::array keys, json::array block_ids) {
  return {{"op", "publish"}, {"keys", std::move(keys)}, {"block_ids", std::move(block_ids)}, {"seal", true}};
}

uint64_t Counted(Client& client, const char* name) {
  return client.Call({{"op", "status"}}).at("counters").at(name).to_number<uint64_t>();
}

uint64_t HashOf(const std::string& bytes) { return protocol::BlockChecksum(std::as_bytes(std::span(bytes))); }

TEST_CASE("a sealed publish hashes each distinct slot once and seals what the slot held") {
  Daemon daemon;
  Engine engine(daemon);
  engine.region.Write(3 * kBlockLen, std::string(kBlockLen, 's'));
  json::object answer = engine.client.Call(SealedPublish({"aa", "bb", "cc"}, {3, 3, 4}));
  REQUIRE(answer.at("ok") == true);
  CHECK(answer.at("published") == 3);
  CHECK(Counted(engine.client, "seal_bytes_hashed") == 2 * kBlockLen);
  engine.region.Write(3 * kBlockLen, std::string(kBlockLen, 't'));
  session::PinRef pin = daemon.index().PinIfPublished(std::string("\xaa", 1));
  REQUIRE(pin);
  CHECK(pin->Checksum() == HashOf(std::string(kBlockLen, 's')));
  CHECK_FALSE(pin->SealHoldsAfterWrite());
}

TEST_CASE("requests after a sealed publish are answered after it, in order") {
  Daemon daemon;
  Engine engine(daemon);
  std::string lines;
  for (int i = 0; i < 8; ++i) {
    json::object publish = SealedPublish({"aa"}, {static_cast<int64_t>(i % kNumBlocks)});
    publish["id"] = 2 * i;
    lines += json::serialize(publish) + "\n";
    lines += json::serialize(json::object{{"op", "unpublish"}, {"keys", json::array{"aa"}}, {"id", 2 * i + 1}}) + "\n";
  }
  engine.client.Send(lines);  // pipelined: one write
  for (int i = 0; i < 16; ++i) {
    json::object answer = engine.client.Response();
    CHECK(answer.at("id") == i);
    CHECK(answer.at("ok") == true);
  }
  CHECK(daemon.index().size() == 0);
}

TEST_CASE("a sealed publish over max-seal-bytes is refused before anything is hashed") {
  Daemon daemon;
  daemon.registry().set_engine_limits({.max_seal_bytes = 2 * kBlockLen, .max_open_request_bytes = 0});
  Engine engine(daemon);
  json::object refused = engine.client.Call(SealedPublish({"aa", "bb", "cc"}, {1, 2, 3}));
  CHECK(ErrorCodeOf(refused) == "conflict");
  CHECK_THAT(MessageOf(refused), Catch::Contains("max-seal-bytes (128)"));
  CHECK(Counted(engine.client, "seal_bytes_hashed") == 0);
  CHECK(Counted(engine.client, "limit_max_seal_bytes") == 1);
  CHECK(daemon.index().size() == 0);
  CHECK(engine.client.Call(SealedPublish({"aa", "bb", "cc"}, {1, 2, 1})).at("ok") == true);
}

TEST_CASE("a sealed store pins its slots with the seals taken off the loop") {
  Daemon daemon;
  Engine engine(daemon);
  engine.region.Write(5 * kBlockLen, std::string(kBlockLen, 'p'));
  json::object store{{"op", "store"},  {"job_id", 1},      {"kv_request_id", "pd-1"},
                     {"keys", {"aa"}}, {"block_ids", {5}}, {"seal", true}};
  REQUIRE(engine.client.Call(store).at("ok") == true);
  CHECK(Counted(engine.client, "seal_bytes_hashed") == kBlockLen);
  CHECK(daemon.index().live_pins(1, 5) == 1);
  // A job id still owed a result is refused as before.
  CHECK(ErrorCodeOf(engine.client.Call(store)) == "conflict");
}

TEST_CASE("an engine closing while its sealed publish is hashed changes nothing") {
  Daemon daemon;
  {
    Engine engine(daemon);
    engine.client.Send(json::serialize(SealedPublish({"aa"}, {1})) + "\n");
  }  // gone before the answer could be read
  for (int i = 0; i < 50; ++i) daemon.Pump(std::chrono::milliseconds(2));
  CHECK(daemon.index().size() == 0);
  CHECK(daemon.registry().engine_count() == 0);
}

}  // namespace
}  // namespace kvpeer::daemon
