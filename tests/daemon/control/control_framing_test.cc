// The control socket's framing and operator ops (control-api.md sections 1
// and 3), over a real Unix socket.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "daemon/control/control_connection.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using namespace testing;

TEST_CASE("the control socket is created with mode 0660") {
  Daemon daemon;
  struct stat st {};
  REQUIRE(::stat(daemon.socket_path().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0660);
}

// A registry of its own for servers started outside the Daemon fixture.
struct Bare {
  boost::asio::io_context io;
  NodeModel model{kBlockLen, std::nullopt, std::nullopt};
  NodePublishedBlocks index;
  EngineRegistry registry{io.get_executor(), model, index, "node-a:5710"};
};

TEST_CASE("a stale socket file is replaced") {
  const std::string path = TempPath("/tmp", ".sock");
  {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  }  // closed without unlinking: a crashed daemon's leftover
  Bare bare;
  ControlServerOptions options;
  options.socket_path = path;
  ControlServer server(bare.io, options, bare.registry);
  CHECK(server.Start().ok());
}

TEST_CASE("a file that is not a socket is never replaced") {
  ShmFile file(1);
  Bare bare;
  ControlServerOptions options;
  options.socket_path = file.path();
  ControlServer server(bare.io, options, bare.registry);
  Status status = server.Start();
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("not a socket"));
  CHECK(::access(file.path().c_str(), F_OK) == 0);
}

TEST_CASE("a live socket file is not replaced") {
  Daemon daemon;
  boost::asio::io_context io;
  EngineRegistry& registry = daemon.registry();
  ControlServerOptions options;
  options.socket_path = daemon.socket_path();
  ControlServer second(io, options, registry);
  Status status = second.Start();
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("in use"));
}

TEST_CASE("status answers without hello, with the documented fields") {
  Daemon daemon;
  Client client(daemon);
  json::object status = client.Call({{"op", "status"}, {"id", "s1"}});
  CHECK(status.at("id") == "s1");
  CHECK(status.at("ok") == true);
  CHECK(status.at("node_id") == "node-a:5710");
  CHECK(status.at("listen") == "127.0.0.1:5710");
  CHECK(status.at("wire_version") == "1.1");
  CHECK(status.at("version").is_string());
  CHECK(status.at("uptime_s").is_number());
  CHECK(status.at("config").at("block-len-test") == 64);
  CHECK(status.at("peers").as_array().size() == 1);
  CHECK(status.at("engines").as_array().empty());
  CHECK(status.at("counters").at("requests").as_int64() >= 1);
}

TEST_CASE("metrics is Prometheus text with HELP and TYPE lines") {
  Daemon daemon;
  Client client(daemon);
  client.Call({{"op", "nope"}});
  json::object metrics = client.Call({{"op", "metrics"}});
  const std::string text(metrics.at("text").as_string());
  CHECK_THAT(text, Catch::Contains("# TYPE kvpeer_up gauge\nkvpeer_up 1\n"));
  CHECK_THAT(text, Catch::Contains("kvpeer_peers{state=\"ready\"} 1"));
  CHECK_THAT(text, Catch::Contains("kvpeer_peer_bytes_sent_total{peer=\"node-b:5710\"} 10"));
  CHECK_THAT(text, Catch::Contains("kvpeer_control_errors_total{code=\"unknown_op\"} 1"));
  CHECK_THAT(text, Catch::Contains("# TYPE kvpeer_requests_total counter"));
}

TEST_CASE("malformed requests are bad_request and the connection stays usable") {
  Daemon daemon;
  Client client(daemon);
  SECTION("not JSON") {
    client.Send("{\"op\": \n");
    json::object response = client.Response();
    CHECK(ErrorCodeOf(response) == "bad_request");
    CHECK(response.at("id").is_null());
  }
  SECTION("not an object") {
    client.Send("[1,2]\n");
    json::object response = client.Response();
    CHECK(ErrorCodeOf(response) == "bad_request");
    CHECK_THAT(MessageOf(response), Catch::Contains("object"));
  }
  SECTION("op missing: the id is echoed") {
    json::object response = client.Call({{"id", 7}});
    CHECK(ErrorCodeOf(response) == "bad_request");
    CHECK(response.at("id") == 7);
    CHECK_THAT(MessageOf(response), Catch::Contains("'op'"));
  }
  SECTION("op not a string") {
    json::object response = client.Call({{"id", json::array{1}}, {"op", 5}});
    CHECK(ErrorCodeOf(response) == "bad_request");
    CHECK(response.at("id") == json::array{1});
  }
  SECTION("an engine op before hello") {
    json::object response = client.Call({{"op", "publish"}, {"keys", json::array{}}, {"block_ids", json::array{}}});
    CHECK(ErrorCodeOf(response) == "bad_request");
    CHECK_THAT(MessageOf(response), Catch::Contains("hello"));
    CHECK(ErrorCodeOf(client.Call({{"op", "poll"}})) == "bad_request");
  }
  CHECK(client.Call({{"op", "status"}}).at("ok") == true);
}

TEST_CASE("an unknown op is unknown_op") {
  Daemon daemon;
  Client client(daemon);
  json::object response = client.Call({{"op", "frobnicate"}, {"id", "x"}});
  CHECK(ErrorCodeOf(response) == "unknown_op");
  CHECK(response.at("id") == "x");
  CHECK_THAT(MessageOf(response), Catch::Contains("frobnicate"));
}

TEST_CASE("several requests in one write are answered in order") {
  Daemon daemon;
  Client client(daemon);
  client.Send("{\"op\":\"status\",\"id\":1}\n{\"op\":\"bogus\",\"id\":2}\n{\"op\":\"metrics\",\"id\":3}\n");
  CHECK(client.Response().at("id") == 1);
  CHECK(client.Response().at("id") == 2);
  CHECK(client.Response().at("id") == 3);
}

TEST_CASE("a request split across writes is one request") {
  Daemon daemon;
  Client client(daemon);
  client.Send("{\"op\":\"sta");
  daemon.Pump(std::chrono::milliseconds(5));
  client.Send("tus\",\"id\":9}\n");
  CHECK(client.Response().at("id") == 9);
}

TEST_CASE("a line longer than 16 MiB is too_large with id null, then the connection closes") {
  Daemon daemon;
  Client client(daemon);
  client.Send("{\"op\":\"status\",\"id\":1}\n");
  std::string huge = "{\"op\":\"status\",\"pad\":\"" + std::string(kMaxControlLineBytes, 'a') + "\"}\n";
  client.Send(huge);
  CHECK(client.Response().at("id") == 1);
  json::object response = client.Response();
  CHECK(ErrorCodeOf(response) == "too_large");
  CHECK(response.at("id").is_null());
  CHECK(client.WaitClosed());
}

TEST_CASE("a line of exactly 16 MiB is accepted") {
  Daemon daemon;
  Client client(daemon);
  const std::string head = "{\"op\":\"status\",\"id\":2,\"pad\":\"";
  const std::string tail = "\"}";
  std::string line = head + std::string(kMaxControlLineBytes - head.size() - tail.size(), 'a') + tail + "\n";
  client.Send(line);
  json::object response = client.Response();
  CHECK(response.at("ok") == true);
}

TEST_CASE("connect and disconnect reach the peer side") {
  Daemon daemon;
  Client client(daemon);
  SECTION("disconnect of a peer without a session is not_found") {
    json::object response = client.Call({{"op", "disconnect"}, {"peer", "node-b:5710"}});
    CHECK(ErrorCodeOf(response) == "not_found");
    CHECK(daemon.peers().disconnects == std::vector<std::string>{"node-b:5710"});
  }
  SECTION("a malformed peer is bad_request and reaches nobody") {
    CHECK(ErrorCodeOf(client.Call({{"op", "connect"}, {"peer", "no-port"}})) == "bad_request");
    CHECK(ErrorCodeOf(client.Call({{"op", "disconnect"}})) == "bad_request");
    CHECK(daemon.peers().connects.empty());
    CHECK(daemon.peers().disconnects.empty());
  }
  SECTION("connect answers when the peer side is done") {
    client.Send(json::serialize(json::object{{"op", "connect"}, {"peer", "node-b:5710"}, {"id", 4}}) + "\n");
    CHECK_FALSE(client.ReadLine(std::chrono::milliseconds(50)));
    REQUIRE(daemon.peers().connect_done);
    daemon.peers().connect_done(Status::Unavailable("refused"));
    json::object response = client.Response();
    CHECK(response.at("id") == 4);
    CHECK(ErrorCodeOf(response) == "peer_unavailable");
  }
  SECTION("connect that succeeds at once") {
    daemon.peers().connect_status = Status();
    CHECK(client.Call({{"op", "connect"}, {"peer", "node-b:5710"}}).at("ok") == true);
  }
}

TEST_CASE("after BeginShutdown new work is shutting_down while status still answers") {
  Daemon daemon;
  Client client(daemon);
  daemon.server().BeginShutdown();
  CHECK(ErrorCodeOf(client.Call(Hello())) == "shutting_down");
  CHECK(client.Call({{"op", "status"}}).at("ok") == true);
}

TEST_CASE("Stop closes connections and removes the socket file") {
  Daemon daemon;
  Client client(daemon);
  client.Call({{"op", "status"}});
  daemon.server().Stop();
  CHECK(client.WaitClosed());
  CHECK(::access(daemon.socket_path().c_str(), F_OK) != 0);
}

}  // namespace
}  // namespace kvpeer::daemon
