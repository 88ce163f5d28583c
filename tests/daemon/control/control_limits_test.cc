// The control socket's bounds (docs/control-api.md, "6. Limits (ours)"):
// --max-control-connections, the unanswered-bytes bound per connection,
// and --max-region-bytes; and accept-error backoff.
#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include "daemon/metrics/accept_backoff.h"
#include "daemon/control/control_server.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using testing::Client;
using testing::Daemon;
using testing::Engine;
using testing::ErrorCodeOf;
namespace json = boost::json;

ControlServerOptions WithMaxConnections(size_t max) {
  ControlServerOptions options = Daemon::Options();
  options.max_connections = max;
  return options;
}

TEST_CASE("a connection beyond --max-control-connections gets one conflict line and is closed") {
  Daemon daemon(WithMaxConnections(2));
  Client first(daemon);
  Client second(daemon);
  CHECK(first.Call({{"op", "status"}}).at("ok") == true);
  CHECK(second.Call({{"op", "status"}}).at("ok") == true);

  Client third(daemon);
  std::optional<std::string> line = third.ReadLine();
  REQUIRE(line);
  json::object refused = json::parse(*line).as_object();
  CHECK(refused.at("id").is_null());
  CHECK(ErrorCodeOf(refused) == "conflict");
  CHECK_THAT(std::string(refused.at("error").at("message").as_string()),
             Catch::Contains("max-control-connections (2) reached"));
  CHECK(third.WaitClosed());
  CHECK(daemon.server().connection_count() == 2);
  CHECK(daemon.registry().counters().Get(Counter::kLimitMaxControlConnections) == 1);

  // The connections in use are unaffected.
  CHECK(first.Call({{"op", "status"}}).at("ok") == true);
}

TEST_CASE("a connection pipelining lines it never reads answers for is held to the byte bound") {
  Daemon daemon;
  Engine engine(daemon);
  // A long poll keeps the processor busy, so every later line waits unanswered.
  engine.client.Send(json::serialize(json::object{{"op", "poll"}, {"wait_ms", 60000}}) + "\n");
  daemon.Pump(std::chrono::milliseconds(10));
  const std::string line = "{\"op\":\"status\",\"pad\":\"" + std::string(4u << 20, 'a') + "\"}\n";
  std::string flood;
  for (int i = 0; i < 20; ++i) flood += line;  // 80 MiB
  const size_t sent = engine.client.SendWithoutReading(flood, std::chrono::milliseconds(1500));
  // The daemon read at most the bound (plus one receive); the rest sits in
  // the kernel's socket buffers, a few MiB at most.
  CHECK(sent < kMaxUnansweredBytes + (8u << 20));
  CHECK(sent >= 2 * line.size());
}

TEST_CASE("max-region-bytes counts every engine's mapped region, node-wide") {
  Daemon daemon;
  daemon.registry().set_max_region_bytes(testing::kNumBlocks * testing::kBlockLen * 3 / 2);
  Engine first(daemon, "engine-1");
  Client second(daemon);
  REQUIRE(second.Call(testing::Hello("engine-2")).at("ok") == true);
  testing::ShmFile file(testing::kNumBlocks * testing::kBlockLen);
  json::object refused =
      second.Call({{"op", "register_region"}, {"path", file.path()}, {"num_blocks", testing::kNumBlocks}});
  CHECK(ErrorCodeOf(refused) == "conflict");
  CHECK_THAT(std::string(refused.at("error").at("message").as_string()), Catch::Contains("max-region-bytes"));
  CHECK(daemon.registry().region_bytes() == testing::kNumBlocks * testing::kBlockLen);
  // Half a region fits.
  json::object half =
      second.Call({{"op", "register_region"}, {"path", file.path()}, {"num_blocks", testing::kNumBlocks / 2}});
  CHECK(half.at("ok") == true);
}

TEST_CASE("a region's bytes are given back when its engine leaves") {
  Daemon daemon;
  daemon.registry().set_max_region_bytes(testing::kNumBlocks * testing::kBlockLen);
  {
    Engine first(daemon, "engine-1");
    CHECK(daemon.registry().region_bytes() == testing::kNumBlocks * testing::kBlockLen);
  }
  for (int i = 0; i < 100 && daemon.registry().region_bytes() != 0; ++i) daemon.Pump(std::chrono::milliseconds(5));
  CHECK(daemon.registry().region_bytes() == 0);
  Engine second(daemon, "engine-2");  // fits again
}

TEST_CASE("accept backoff pauses longer each time and logs at most once a second") {
  AcceptBackoff backoff("test listener");
  const boost::system::error_code emfile(EMFILE, boost::system::system_category());
  CHECK(backoff.Failed(emfile) == AcceptBackoff::kFirstPause);
  CHECK(backoff.Failed(emfile) == AcceptBackoff::kFirstPause * 2);
  for (int i = 0; i < 100; ++i) CHECK(backoff.Failed(emfile) <= AcceptBackoff::kMaxPause);
  CHECK(backoff.Failed(emfile) == AcceptBackoff::kMaxPause);
  CHECK(backoff.failures() == 103);
  CHECK(backoff.logged() == 1);
  backoff.Succeeded();
  CHECK(backoff.Failed(emfile) == AcceptBackoff::kFirstPause);
}

}  // namespace
}  // namespace kvpeer::daemon
