// How a control connection answers pipelined lines (daemon/control/
// control_connection.h): answers of consecutive lines go out together and
// in request order, a line that waits sends the answers before it first,
// answers the client does not read are bounded, and descriptors stay with
// their line however much one read takes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "daemon/control/control_server.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using testing::Client;
using testing::Daemon;
using testing::Engine;
using testing::ErrorCodeOf;
namespace json = boost::json;

std::string PollLine(int id) { return "{\"op\":\"poll\",\"id\":" + std::to_string(id) + "}\n"; }

TEST_CASE("a pipelined burst of many lines is answered in request order") {
  Daemon daemon;
  Engine engine(daemon);
  constexpr int kLines = 5000;
  std::string burst;
  for (int i = 0; i < kLines; ++i) {
    // Answers of every kind interleave: ok, bad_request, unknown_op.
    if (i % 7 == 3) {
      burst += "{\"op\":\"poll\",\"id\":" + std::to_string(i) + ",\"wait_ms\":\"soon\"}\n";
    } else if (i % 11 == 5) {
      burst += "{\"op\":\"bogus\",\"id\":" + std::to_string(i) + "}\n";
    } else {
      burst += PollLine(i);
    }
  }
  engine.client.Send(burst);
  for (int i = 0; i < kLines; ++i) {
    json::object response = engine.client.Response();
    REQUIRE(response.at("id") == i);
    if (i % 7 == 3) {
      CHECK(ErrorCodeOf(response) == "bad_request");
    } else if (i % 11 == 5) {
      CHECK(ErrorCodeOf(response) == "unknown_op");
    } else {
      CHECK(response.at("results").as_array().empty());
    }
  }
}

TEST_CASE("many lines larger than the parse buffer are answered (its memory does not grow per line)") {
  Daemon daemon;
  Engine engine(daemon);
  const std::string pad(64 * 1024, 'p');
  std::string lines;
  for (int i = 0; i < 200; ++i) {
    lines += "{\"op\":\"poll\",\"id\":" + std::to_string(i) + ",\"pad\":[\"" + pad + "\"]}\n";
  }
  engine.client.Send(lines);
  for (int i = 0; i < 200; ++i) {
    json::object response = engine.client.Response();
    REQUIRE(response.at("id") == i);
    CHECK(response.at("ok") == true);
  }
}

TEST_CASE("a line that waits sends the answers before it first; later lines wait for it") {
  Daemon daemon;
  Engine engine(daemon);
  engine.client.Send(PollLine(1) + "{\"op\":\"poll\",\"id\":2,\"wait_ms\":60000}\n" + PollLine(3));
  std::optional<std::string> first = engine.client.ReadLine(std::chrono::seconds(5));
  REQUIRE(first);
  CHECK(json::parse(*first).at("id") == 1);
  // The long poll holds its answer, and the one after it.
  CHECK_FALSE(engine.client.ReadLine(std::chrono::milliseconds(200)));
  // End of input cuts the wait: both answers come, in order.
  engine.client.ShutdownWrite();
  CHECK(engine.client.Response().at("id") == 2);
  CHECK(engine.client.Response().at("id") == 3);
  CHECK(engine.client.WaitClosed());
}

TEST_CASE("answers a client does not read are bounded: the daemon stops answering and reading") {
  Daemon daemon;
  Engine engine(daemon);
  std::string flood;
  int lines = 0;
  while (flood.size() < (8u << 20)) flood += PollLine(lines++);
  const size_t sent = engine.client.SendWithoutReading(flood, std::chrono::milliseconds(1500));
  // Answers are ~4x their requests: at most kMaxPendingAnswerBytes of them
  // wait in the daemon, plus what the kernel's socket buffers hold.
  CHECK(sent < kMaxPendingAnswerBytes + (2u << 20));
  CHECK(sent > 0);
  // Every whole line taken is answered, in order, once the client reads.
  const auto whole_lines = std::count(flood.begin(), flood.begin() + static_cast<std::ptrdiff_t>(sent), '\n');
  for (int i = 0; i < whole_lines; ++i) REQUIRE(engine.client.Response().at("id") == i);
  // The connection still works: this ends the partial line the flood may
  // have left (an answer of its own), and the next line is answered.
  engine.client.Send("\n" + PollLine(-1));
  json::object answer = engine.client.Response();
  if (answer.at("ok") == true) CHECK(answer.at("id") == whole_lines);  // the flood ended on a line's end
  CHECK(engine.client.Response().at("id") == -1);
}

TEST_CASE("a descriptor stays with its line when one read takes several lines") {
  Daemon daemon;
  Client client(daemon);
  REQUIRE(client.Call(testing::Hello()).at("ok") == true);
  UniqueFd memfd = testing::MakeMemfd(testing::kNumBlocks * testing::kBlockLen);
  // All sent before the daemon runs, so it may read them together. (The
  // line with the descriptor starts the pipeline: the kernel may glue an
  // earlier, descriptor-less sendmsg to the front of the one carrying it.)
  client.SendWithFd(json::serialize(json::object{
                        {"op", "register_region"}, {"fd", true}, {"num_blocks", testing::kNumBlocks}, {"id", 1}}) +
                        "\n" + PollLine(2),
                    memfd.get());
  client.SendWithFd(PollLine(3) + PollLine(4), -1);
  json::object registered = client.Response();
  CHECK(registered.at("id") == 1);
  CHECK(registered.at("ok") == true);
  CHECK(client.Response().at("id") == 2);
  CHECK(client.Response().at("id") == 3);
  CHECK(client.Response().at("id") == 4);
}

TEST_CASE("a descriptor reaches its line when a descriptor-less line is read together with it") {
  Daemon daemon;
  Client client(daemon);
  UniqueFd memfd = testing::MakeMemfd(testing::kNumBlocks * testing::kBlockLen);
  // hello and register_region pipelined without waiting, each in its own
  // sendmsg as clients send them: the kernel gives both to one read, the
  // descriptor arriving with hello's bytes in front.
  client.SendWithFd(json::serialize(testing::Hello()) + "\n", -1);
  client.SendWithFd(json::serialize(json::object{
                        {"op", "register_region"}, {"fd", true}, {"num_blocks", testing::kNumBlocks}, {"id", 7}}) +
                        "\n",
                    memfd.get());
  CHECK(client.Response().at("ok") == true);
  json::object registered = client.Response();
  CHECK(registered.at("id") == 7);
  CHECK(registered.at("ok") == true);
  // A descriptor is taken once: a second register_region in a later read
  // has none (and is refused as the second region anyway).
  json::object again =
      client.Call(json::object{{"op", "register_region"}, {"fd", true}, {"num_blocks", testing::kNumBlocks}});
  CHECK(again.at("ok") == false);
}

TEST_CASE("answers written straight into the output are the JSON the API specifies") {
  Daemon daemon;
  Engine engine(daemon);
  // Ids of every kind come back as json::serialize prints them; strings escaped.
  for (const char* id :
       {R"("a\"b\\c\u0001é")", "-12", "1.5e3", "18446744073709551615", "[1,{\"x\":null}]", "true", "null"}) {
    engine.client.Send(std::string("{\"op\":\"poll\",\"id\":") + id + "}\n");
    std::optional<std::string> line = engine.client.ReadLine();
    REQUIRE(line);
    const json::value expected_id = json::parse(id);
    CHECK(*line == "{\"id\":" + json::serialize(expected_id) +
                       ",\"ok\":true,\"results\":[],\"failed_requests\":[],\"released\":[]}");
  }
}

}  // namespace
}  // namespace kvpeer::daemon
