// kvpeer/client.h's deadlines and line bound (ClientOptions) against fake
// daemons on real Unix sockets: one that never answers, one that never
// reads, one whose accept queue is full, and one that floods a line without
// a newline (issue 25, finding 6: before, the client blocked for ever on
// the first three and held all of the fourth's bytes).
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kvpeer/client.h"

namespace kvpeer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A listening Unix socket in a scratch directory; `behave` runs on a thread
// with each accepted connection (none when accept is false).
class FakeDaemon {
 public:
  enum class Mode { kSilent, kNeverRead, kFlood, kNeverAccept };

  explicit FakeDaemon(Mode mode) : mode_(mode) {
    path_ = (std::filesystem::temp_directory_path() /
             ("kvpeer-fake-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + ".sock"))
                .string();
    ::unlink(path_.c_str());
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(::listen(listener_, mode == Mode::kNeverAccept ? 0 : 4) == 0);
    if (mode != Mode::kNeverAccept) thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDaemon() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
    for (int fd : fillers_) ::close(fd);
    ::unlink(path_.c_str());
  }

  const std::string& path() const { return path_; }
  // Bytes the flood wrote before the client stopped taking them.
  size_t flooded() const { return flooded_; }

  // Fills the accept queue of a kNeverAccept daemon with connections.
  void FillAcceptQueue() {
    for (int i = 0; i < 64; ++i) {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
      const bool queued = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
      if (!queued) {
        REQUIRE(errno == EAGAIN);
        ::close(fd);
        return;
      }
      fillers_.push_back(fd);
    }
    FAIL("the accept queue never filled");
  }

 private:
  void Serve() {
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    char buffer[4096];
    switch (mode_) {
      case Mode::kSilent:
        // Reads every request, answers none.
        while (!stop_ && ::recv(fd, buffer, sizeof(buffer), 0) > 0) {
        }
        break;
      case Mode::kNeverRead:
        while (!stop_) std::this_thread::sleep_for(10ms);
        break;
      case Mode::kFlood: {
        const std::string chunk(64 * 1024, 'x');
        for (;;) {
          const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
          if (n <= 0) break;  // the client closed
          flooded_ += static_cast<size_t>(n);
          if (flooded_ > (size_t{256} << 20)) break;  // the bound is not there: stop anyway
        }
        break;
      }
      case Mode::kNeverAccept:
        break;
    }
    ::close(fd);
  }

  static inline std::atomic<int> counter_{0};
  Mode mode_;
  std::string path_;
  int listener_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> flooded_{0};
  std::vector<int> fillers_;
};

ClientOptions Short() {
  ClientOptions options;
  options.connect_timeout = 300ms;
  options.request_timeout = 300ms;
  return options;
}

TEST_CASE("a daemon that never answers costs the request timeout, then kTimeout and a closed client") {
  FakeDaemon daemon(FakeDaemon::Mode::kSilent);
  Result<Client> connected = Client::Connect(daemon.path(), Short());
  REQUIRE(connected.ok());
  Client& client = connected.value();
  const auto start = Clock::now();
  Result<Answer> status = client.Status();
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code == ErrorCode::kTimeout);
  CHECK(status.error().message.find("no answer from kvpeerd at " + daemon.path() + " within 300 ms") !=
        std::string::npos);
  CHECK(SecondsSince(start) >= 0.29);
  CHECK(SecondsSince(start) < 2.0);
  CHECK_FALSE(client.open());
  CHECK(ErrorCodeName(ErrorCode::kTimeout) == "timeout");
}

TEST_CASE("a poll's own wait_ms is added to the request timeout") {
  FakeDaemon daemon(FakeDaemon::Mode::kSilent);
  Result<Client> connected = Client::Connect(daemon.path(), Short());
  REQUIRE(connected.ok());
  const auto start = Clock::now();
  Result<PollReport> report = connected.value().Poll(700);
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().code == ErrorCode::kTimeout);
  CHECK(report.error().message.find("plus the request's wait_ms") != std::string::npos);
  CHECK(SecondsSince(start) >= 0.99);  // 700 ms asked + 300 ms of timeout
  CHECK(SecondsSince(start) < 3.0);
}

TEST_CASE("a daemon that never reads costs the request timeout on send") {
  FakeDaemon daemon(FakeDaemon::Mode::kNeverRead);
  Result<Client> connected = Client::Connect(daemon.path(), Short());
  REQUIRE(connected.ok());
  const auto start = Clock::now();
  // Far more than the socket buffers hold.
  Result<void> sent =
      connected.value().Send(Request{"{\"op\":\"status\",\"id\":\"" + std::string(8 << 20, 'a') + "\"}"});
  REQUIRE_FALSE(sent.ok());
  CHECK(sent.error().code == ErrorCode::kTimeout);
  CHECK(sent.error().message.find("took no request bytes") != std::string::npos);
  CHECK(SecondsSince(start) < 2.0);
}

TEST_CASE("a daemon whose accept queue is full costs the connect timeout") {
  FakeDaemon daemon(FakeDaemon::Mode::kNeverAccept);
  daemon.FillAcceptQueue();
  const auto start = Clock::now();
  Result<Client> connected = Client::Connect(daemon.path(), Short());
  REQUIRE_FALSE(connected.ok());
  CHECK(connected.error().code == ErrorCode::kTimeout);
  CHECK(connected.error().message.find("connect_timeout") != std::string::npos);
  CHECK(SecondsSince(start) >= 0.25);
  CHECK(SecondsSince(start) < 2.0);
}

TEST_CASE("an answer line longer than 16 MiB is kBadAnswer, not memory growth") {
  FakeDaemon daemon(FakeDaemon::Mode::kFlood);
  ClientOptions options;  // the default bound: the API's 16 MiB
  Result<Client> connected = Client::Connect(daemon.path(), options);
  REQUIRE(connected.ok());
  Result<std::string> line = connected.value().ReceiveLine();
  REQUIRE_FALSE(line.ok());
  CHECK(line.error().code == ErrorCode::kBadAnswer);
  CHECK(line.error().message.find("longer than 16777216 bytes") != std::string::npos);
  CHECK_FALSE(connected.value().open());
  // The client took at most the bound and one read more; what the flood
  // wrote beyond that sat in the socket buffers until the close.
  std::this_thread::sleep_for(100ms);
  CHECK(daemon.flooded() < (size_t{16} << 20) + (size_t{8} << 20));
}

TEST_CASE("a smaller max_line_bytes bounds answers as configured") {
  FakeDaemon daemon(FakeDaemon::Mode::kFlood);
  ClientOptions options;
  options.max_line_bytes = 1 << 20;
  Result<Client> connected = Client::Connect(daemon.path(), options);
  REQUIRE(connected.ok());
  Result<Answer> answer = connected.value().Receive();
  REQUIRE_FALSE(answer.ok());
  CHECK(answer.error().code == ErrorCode::kBadAnswer);
  CHECK(answer.error().message.find("longer than 1048576 bytes") != std::string::npos);
}

}  // namespace
}  // namespace kvpeer
