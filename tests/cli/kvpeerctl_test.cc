// Runs the built kvpeerctl binary against no socket, an inaccessible socket
// and a one-shot fake daemon on a real Unix socket in a temp directory.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/status_view.h"

extern char** environ;

namespace kvpeer::cli {
namespace {

namespace json = boost::json;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvpeerctl-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Run {
  int exit_code = -1;
  std::string out, err;
};

// Runs kvpeerctl with `args`; stdout and stderr go through files so that a
// large output cannot block the child on a full pipe.
Run RunCtl(const TempDir& dir, const std::vector<std::string>& args) {
  std::string out_path = dir.path() + "/stdout", err_path = dir.path() + "/stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> all = {KVPEERCTL_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : all) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int spawned = posix_spawn(&pid, KVPEERCTL_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(spawned == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  Run run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = ReadFile(out_path);
  run.err = ReadFile(err_path);
  return run;
}

int ListenUnix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  return fd;
}

// A daemon stand-in: accepts one connection, reads one request line, and
// answers `reply` (nothing at all if `reply` is empty, closing instead).
// With a `dribble` interval it writes the answer one byte per interval, as a
// hostile or wedged daemon might, and stops once the client has gone.
class FakeDaemon {
 public:
  FakeDaemon(const std::string& path, std::string reply,
             std::chrono::milliseconds dribble = std::chrono::milliseconds(0))
      : fd_(ListenUnix(path)), reply_(std::move(reply)), dribble_(dribble) {
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDaemon() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }

  // The request line received; call after the client has exited.
  json::object Request() {
    if (thread_.joinable()) thread_.join();
    return json::parse(request_).as_object();
  }

 private:
  void Serve() {
    pollfd ready{fd_, POLLIN, 0};
    if (::poll(&ready, 1, 10000) != 1) return;  // the client never came: the test's checks report it
    int client = ::accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    char c;
    while (::read(client, &c, 1) == 1 && c != '\n') request_.push_back(c);
    if (!reply_.empty()) Answer(client, reply_ + "\n");
    ::close(client);
  }

  void Answer(int client, const std::string& line) const {
    if (dribble_.count() == 0) {
      (void)!::send(client, line.data(), line.size(), MSG_NOSIGNAL);
      return;
    }
    for (char c : line) {
      std::this_thread::sleep_for(dribble_);
      if (::send(client, &c, 1, MSG_NOSIGNAL) != 1) return;  // the client gave up (EPIPE)
    }
  }

  int fd_;
  std::string reply_;
  std::chrono::milliseconds dribble_;
  std::string request_;
  std::thread thread_;
};

const char* kStatusReply =
    R"({"id":1,"ok":true,"node_id":"node-a:5710","listen":"0.0.0.0:5710","version":"0.1.0",)"
    R"("wire_version":"1.1","uptime_s":3725,"config":{"listen":"0.0.0.0:5710"},)"
    R"("access":{"publishers":{"uids":[0,4294967294],"gids":[0]},"operators":{"uids":[0],"gids":[]}},)"
    R"("peers":[{"peer_id":"node-b:5710","state":"ready","since":"2024-05-01T10:00:00Z",)"
    R"("rtt_us":120,"bytes_sent":1536,"bytes_received":3221225472,"loads_in_flight":2,)"
    R"("rounds_serving":1,"last_error":null},{"peer_id":"node-c:5710","state":"backoff",)"
    R"("since":"2024-05-01T10:01:00Z","rtt_us":null,"bytes_sent":0,"bytes_received":0,)"
    R"("loads_in_flight":0,"rounds_serving":0,"last_error":"connection refused"}],)"
    R"("engines":[{"client":"vllm-0","pid":4242,"num_blocks":1024,"published":17,)"
    R"("loads_in_flight":2}],"counters":{"loads_ok":5,"loads_failed":1}})";

TEST_CASE("no daemon: exit 2 and say so") {
  TempDir dir;
  std::string socket = dir.path() + "/none.sock";
  Run run = RunCtl(dir, {"--socket", socket, "status"});
  CHECK(run.exit_code == 2);
  CHECK(run.err ==
        "kvpeerctl: cannot reach kvpeerd at " + socket + ": No such file or directory (is the daemon running?)\n");
  CHECK(run.out.empty());
}

TEST_CASE("a stale socket file: exit 2, connection refused") {
  TempDir dir;
  std::string socket = dir.path() + "/stale.sock";
  ::close(ListenUnix(socket));  // the file stays, nobody listens
  Run run = RunCtl(dir, {"--socket", socket, "status"});
  CHECK(run.exit_code == 2);
  CHECK(Contains(run.err, "Connection refused (is the daemon running? the socket file may be stale)"));
}

TEST_CASE("an inaccessible socket: exit 2 naming the group to join") {
  if (::geteuid() == 0) {
    // root bypasses file permissions, so connect() would succeed.
    WARN("running as root: the permission-denied case cannot be produced; skipped");
    return;
  }
  TempDir dir;
  std::string socket = dir.path() + "/locked.sock";
  int fd = ListenUnix(socket);
  ::chmod(socket.c_str(), 0);
  Run run = RunCtl(dir, {"--socket", socket, "status"});
  ::close(fd);
  CHECK(run.exit_code == 2);
  CHECK(Contains(run.err, "cannot reach kvpeerd at " + socket + ": Permission denied"));
  CHECK(Contains(run.err, "the socket is not accessible to this user; join its group"));
}

TEST_CASE("status: human-readable view of the answer") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  FakeDaemon daemon(socket, kStatusReply);
  Run run = RunCtl(dir, {"--socket", socket, "status"});
  json::object request = daemon.Request();
  CHECK(request.at("op") == "status");
  CHECK(request.at("id") == 1);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(Contains(run.out, "node     node-a:5710\n"));
  CHECK(Contains(run.out, "listen   0.0.0.0:5710\n"));
  CHECK(Contains(run.out, "version  0.1.0 (wire 1.1)\n"));
  CHECK(Contains(run.out, "uptime   1h 02m 05s\n"));
  // Who may publish and operate (status.access), with the names this machine knows.
  CHECK(Contains(run.out, "publish  uids 0 (root), 4294967294; gids 0 (root)\n"));
  CHECK(Contains(run.out, "operate  uids 0 (root); gids none\n"));
  CHECK(Contains(run.out, "PEER"));
  CHECK(Contains(run.out, "node-b:5710"));
  CHECK(Contains(run.out, "1.5 KiB"));
  CHECK(Contains(run.out, "3.0 GiB"));
  CHECK(Contains(run.out, "connection refused"));
  CHECK(Contains(run.out, "vllm-0"));
  CHECK(Contains(run.out, "4242"));
  CHECK(Contains(run.out, "loads_failed"));
  CHECK(run.err.empty());
}

TEST_CASE("json flag before or after the command prints the daemon's answer") {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--json", "status"}, std::vector<std::string>{"status", "--json"}}) {
    TempDir dir;
    std::string socket = dir.path() + "/d.sock";
    FakeDaemon daemon(socket, kStatusReply);
    args.insert(args.begin(), {"--socket=" + socket});
    Run run = RunCtl(dir, args);
    daemon.Request();
    CHECK(run.exit_code == 0);
    CHECK(json::parse(run.out) == json::parse(kStatusReply));
  }
}

TEST_CASE("peers: the peers table, or the peers array with --json") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  {
    FakeDaemon daemon(socket, kStatusReply);
    Run run = RunCtl(dir, {"peers", "--socket", socket});
    CHECK(daemon.Request().at("op") == "status");
    CHECK(run.exit_code == 0);
    CHECK(Contains(run.out, "node-c:5710"));
    CHECK_FALSE(Contains(run.out, "vllm-0"));
  }
  std::filesystem::remove(socket);
  FakeDaemon daemon(socket, kStatusReply);
  Run run = RunCtl(dir, {"peers", "--socket", socket, "--json"});
  daemon.Request();
  CHECK(json::parse(run.out) == json::parse(kStatusReply).at("peers"));
}

TEST_CASE("metrics prints the text field") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  FakeDaemon daemon(socket, R"({"id":1,"ok":true,"text":"# TYPE kvpeer_loads_total counter\nkvpeer_loads_total 5\n"})");
  Run run = RunCtl(dir, {"--socket", socket, "metrics"});
  CHECK(daemon.Request().at("op") == "metrics");
  CHECK(run.exit_code == 0);
  CHECK(run.out == "# TYPE kvpeer_loads_total counter\nkvpeer_loads_total 5\n");
}

TEST_CASE("connect and disconnect send the peer") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  for (std::string op : {"connect", "disconnect"}) {
    std::filesystem::remove(socket);
    FakeDaemon daemon(socket, R"({"id":1,"ok":true})");
    Run run = RunCtl(dir, {"--socket", socket, op, "[fd00::2]:5710"});
    json::object request = daemon.Request();
    CHECK(request.at("op") == op.c_str());
    CHECK(request.at("peer") == "[fd00::2]:5710");
    CHECK(run.exit_code == 0);
    CHECK(Contains(run.out, "[fd00::2]:5710"));
  }
}

TEST_CASE("a daemon error: exit 1 with code and message on stderr") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  const char* reply = R"({"id":1,"ok":false,"error":{"code":"not_found","message":"no session with peer 'x:1'"}})";
  {
    FakeDaemon daemon(socket, reply);
    Run run = RunCtl(dir, {"--socket", socket, "disconnect", "x:1"});
    daemon.Request();
    CHECK(run.exit_code == 1);
    CHECK(run.err == "kvpeerctl: disconnect failed: not_found: no session with peer 'x:1'\n");
    CHECK(run.out.empty());
  }
  std::filesystem::remove(socket);
  FakeDaemon daemon(socket, reply);
  Run run = RunCtl(dir, {"--socket", socket, "disconnect", "x:1", "--json"});
  daemon.Request();
  CHECK(run.exit_code == 1);
  CHECK(json::parse(run.out) == json::parse(reply));
}

TEST_CASE("a daemon that closes without answering: exit 2") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  FakeDaemon daemon(socket, "");
  Run run = RunCtl(dir, {"--socket", socket, "status"});
  daemon.Request();
  CHECK(run.exit_code == 2);
  CHECK(Contains(run.err, "kvpeerd closed the connection without answering"));
}

TEST_CASE("a daemon answering garbage: exit 2") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  FakeDaemon daemon(socket, "not json");
  Run run = RunCtl(dir, {"--socket", socket, "status"});
  daemon.Request();
  CHECK(run.exit_code == 2);
  CHECK(Contains(run.err, "kvpeerd sent an answer that is not JSON"));
}

// Issue 11, finding 5: the timeout was SO_RCVTIMEO per recv, so a daemon
// sending one byte a second kept `--timeout-s 3` waiting past 25 s.
TEST_CASE("the timeout bounds the whole exchange: a daemon dribbling its answer is cut off") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  FakeDaemon daemon(socket, R"({"id":1,"ok":true})", std::chrono::seconds(1));
  auto start = std::chrono::steady_clock::now();
  Run run = RunCtl(dir, {"--socket", socket, "--timeout-s", "2", "status"});
  auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(daemon.Request().at("op") == "status");
  INFO(run.out << run.err);
  CHECK(run.exit_code == 2);
  CHECK(Contains(run.err, "kvpeerctl: kvpeerd did not answer within 2 s"));
  CHECK(run.out.empty());
  CHECK(elapsed >= std::chrono::milliseconds(1900));
  CHECK(elapsed < std::chrono::seconds(4));
}

// Boost.JSON writes an infinite double as `Infinity`, which is not JSON;
// a daemon answering 1e999 (parsed as infinity) made `--json` print it.
TEST_CASE("json output is valid JSON: numbers beyond double range become null, nothing else changes") {
  const char* reply = R"({"id":null,"ok":true,"node_id":"x","uptime_s":1e999,"peers":[{"peer_id":"p",)"
                      R"("rtt_us":-1e999,"bytes_sent":1e300}],"counters":{"deep":[[{"n":1e999}],2]}})";
  for (std::string command : {"status", "peers"}) {
    TempDir dir;
    std::string socket = dir.path() + "/d.sock";
    FakeDaemon daemon(socket, reply);
    Run run = RunCtl(dir, {"--socket", socket, "--json", command});
    daemon.Request();
    INFO(command << ": " << run.out << run.err);
    CHECK(run.exit_code == 0);
    boost::system::error_code error;
    json::value printed = json::parse(run.out, error);
    REQUIRE_FALSE(error);
    json::value peers = command == "peers" ? printed : printed.at("peers");
    CHECK(peers.at(0).at("rtt_us").is_null());
    CHECK(peers.at(0).at("bytes_sent") == 1e300);
    CHECK(peers.at(0).at("peer_id") == "p");
    if (command == "status") {
      CHECK(printed.at("uptime_s").is_null());
      CHECK(printed.at("counters").at("deep").at(0).at(0).at("n").is_null());
      CHECK(printed.at("counters").at("deep").at(1) == 2);
      CHECK(printed.at("node_id") == "x");
      CHECK(printed.at("id").is_null());
    }
  }
}

TEST_CASE("json output of a daemon error prints valid JSON too") {
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  FakeDaemon daemon(socket, R"({"id":1,"ok":false,"retry_after":1e999,"error":{"code":"conflict","message":"m"}})");
  Run run = RunCtl(dir, {"--socket", socket, "--json", "status"});
  daemon.Request();
  CHECK(run.exit_code == 1);
  boost::system::error_code error;
  json::value printed = json::parse(run.out, error);
  REQUIRE_FALSE(error);
  CHECK(printed.at("retry_after").is_null());
}

// AsCount cast any non-negative double to uint64: undefined for 1e300, and
// in a plain build "uptime 0s" and "0 B" were printed for it. (GCC's
// -fsanitize=undefined does not include float-cast-overflow, so the output
// checks are what catch it.)
TEST_CASE("status shows numbers out of uint64 range as their JSON text, without undefined behaviour") {
  const char* reply =
      R"({"id":1,"ok":true,"node_id":"x","uptime_s":1e300,"peers":[{"peer_id":"p","state":"ready",)"
      R"("since":"-","rtt_us":-1e300,"bytes_sent":1e300,"bytes_received":1.8446744073709552e19,)"
      R"("loads_in_flight":1e300,"rounds_serving":-1,"last_error":null}],)"
      R"("engines":[{"client":"e","pid":-1e300,"num_blocks":1e300,"published":1e19,"loads_in_flight":-0.5}],)"
      R"("counters":{"huge":1e300,"negative":-1e300,"inf":1e999,"fits":1024.0}})";
  TempDir dir;
  std::string socket = dir.path() + "/d.sock";
  FakeDaemon daemon(socket, reply);
  Run run = RunCtl(dir, {"--socket", socket, "status"});
  daemon.Request();
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.err.empty());
  CHECK(Contains(run.out, "uptime   1E300\n"));
  // RTT_US, then SENT (1e300 is no byte count) and RECEIVED (2^64 itself is out of range).
  CHECK(Contains(run.out, "-1E300  1E300  1.8446744073709552E19"));
  CHECK(Contains(run.out, "-1E300  1E300   1E19"));  // engine pid, num_blocks, published
  CHECK(Contains(run.out, "huge      1E300\n"));
  CHECK(Contains(run.out, "inf       -\n"));  // 1e999 parsed as infinity: null since the json fix
  CHECK_FALSE(Contains(run.out, "Infinity"));
}

TEST_CASE("usage errors exit 2 without touching the socket") {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  for (const Case& c :
       {Case{{}, "missing COMMAND"}, Case{{"stats"}, "unknown command 'stats'"},
        Case{{"connect"}, "connect needs a PEER"}, Case{{"status", "extra"}, "unexpected argument 'extra'"},
        Case{{"--frobnicate", "status"}, "unknown option '--frobnicate'"},
        Case{{"status", "--socket"}, "--socket needs a PATH"},
        Case{{"connect", "nohost"}, "PEER 'nohost' is not HOST:PORT"},
        Case{{"--timeout-s", "0", "status"}, "--timeout-s: '0' must be"}}) {
    Run run = RunCtl(dir, c.args);
    INFO(run.err);
    CHECK(run.exit_code == 2);
    CHECK(Contains(run.err, "kvpeerctl: " + c.expected));
  }
}

TEST_CASE("help and version flags exit 0") {
  TempDir dir;
  Run help = RunCtl(dir, {"--help"});
  CHECK(help.exit_code == 0);
  CHECK(Contains(help.out, "usage: kvpeerctl [--socket PATH] [--json]"));
  Run version = RunCtl(dir, {"--version"});
  CHECK(version.exit_code == 0);
  CHECK(Contains(version.out, "kvpeerctl "));
}

TEST_CASE("byte and duration formatting") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1024) == "1.0 KiB");
  CHECK(FormatBytes(1536) == "1.5 KiB");
  CHECK(FormatBytes(3ull << 30) == "3.0 GiB");
  CHECK(FormatDuration(45) == "45s");
  CHECK(FormatDuration(187) == "3m 07s");
  CHECK(FormatDuration(7627) == "2h 07m 07s");
  CHECK(FormatDuration(86400 * 4 + 7380) == "4d 02h 03m");
}

TEST_CASE("status view: counters at 0 are counted, not listed; --json keeps them") {
  auto view = [](const char* counters) {
    std::ostringstream out;
    PrintStatus(json::parse(std::string(R"({"node_id":"a:1","counters":)") + counters + "}").as_object(), out);
    return out.str();
  };
  const std::string some = view(R"({"loads_ok":5,"loads_failed":0,"checksum_failures":0,"dials":1.0})");
  CHECK(Contains(some, "loads_ok"));
  CHECK(Contains(some, "dials"));
  CHECK_FALSE(Contains(some, "loads_failed"));
  CHECK_FALSE(Contains(some, "checksum_failures"));
  CHECK(Contains(some, "(2 more at 0; --json lists them)"));
  CHECK(Contains(view(R"({"loads_ok":0,"dials":0})"), "counters: all 2 at 0 (--json lists them)"));
  CHECK(Contains(view("{}"), "counters: none"));
}

}  // namespace
}  // namespace kvpeer::cli
