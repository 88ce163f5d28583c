// daemon/systemd_notify.h against a fake NOTIFY_SOCKET: the exact datagrams
// systemd would receive, and sd_watchdog_enabled's rules for WATCHDOG_USEC
// and WATCHDOG_PID. (tests/systemd/test_notify.py runs the real kvpeerd.)
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "daemon/systemd_notify.h"

namespace kvpeer::daemon {
namespace {

using std::chrono::microseconds;

// Clears the variables libsystemd reads, before and after each test.
struct CleanEnvironment {
  CleanEnvironment() { Clear(); }
  ~CleanEnvironment() { Clear(); }
  static void Clear() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
  }
};

// A Unix datagram socket in a private temp dir, named by NOTIFY_SOCKET.
class FakeNotifySocket {
 public:
  FakeNotifySocket() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvpeer-notify-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    path_ = dir_ + "/notify.sock";
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::runtime_error("bind failed");
    }
    timeval timeout{.tv_sec = 0, .tv_usec = 200000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }
  ~FakeNotifySocket() {
    ::close(fd_);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  FakeNotifySocket(const FakeNotifySocket&) = delete;
  FakeNotifySocket& operator=(const FakeNotifySocket&) = delete;

  // The next datagram, or nullopt if none arrives within 200 ms.
  std::optional<std::string> Receive() const {
    char buffer[4096];
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0) return std::nullopt;
    return std::string(buffer, static_cast<size_t>(n));
  }

 private:
  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

TEST_CASE("Ready sends READY=1 with the status line") {
  CleanEnvironment env;
  FakeNotifySocket systemd;
  systemd::Ready("node 127.0.0.1:5710, 0 peers ready, 0 engines");
  CHECK(systemd.Receive() == "READY=1\nSTATUS=node 127.0.0.1:5710, 0 peers ready, 0 engines");
  CHECK(systemd.Receive() == std::nullopt);
}

TEST_CASE("Status, Stopping and Watchdog send their assignments") {
  CleanEnvironment env;
  FakeNotifySocket systemd;
  systemd::Status("serving");
  CHECK(systemd.Receive() == "STATUS=serving");
  systemd::Stopping();
  CHECK(systemd.Receive() == "STOPPING=1");
  systemd::Stopping("draining");
  CHECK(systemd.Receive() == "STOPPING=1\nSTATUS=draining");
  systemd::Watchdog();
  CHECK(systemd.Receive() == "WATCHDOG=1");
  systemd::Watchdog("node a:1, 2 peers ready, 1 engines");
  CHECK(systemd.Receive() == "WATCHDOG=1\nSTATUS=node a:1, 2 peers ready, 1 engines");
}

TEST_CASE("a status text stays on one line, and an empty one is not sent") {
  CleanEnvironment env;
  FakeNotifySocket systemd;
  // A newline would start a new assignment ("READY=1" smuggled in here).
  systemd::Status("first\nREADY=1\r\nlast");
  CHECK(systemd.Receive() == "STATUS=first READY=1  last");
  systemd::Status("");
  CHECK(systemd.Receive() == std::nullopt);
}

TEST_CASE("without NOTIFY_SOCKET every notification is a no-op") {
  CleanEnvironment env;
  systemd::Ready("x");
  systemd::Status("x");
  systemd::Watchdog("x");
  systemd::Stopping("x");
  SUCCEED("nothing to send to, nothing failed");
}

TEST_CASE("WatchdogInterval follows WATCHDOG_USEC and WATCHDOG_PID") {
  CleanEnvironment env;
  SECTION("unset: no watchdog") { CHECK(systemd::WatchdogInterval() == std::nullopt); }
  SECTION("WATCHDOG_USEC alone applies to this process") {
    ::setenv("WATCHDOG_USEC", "200000", 1);
    CHECK(systemd::WatchdogInterval() == microseconds(200000));
  }
  SECTION("WATCHDOG_PID naming this process") {
    ::setenv("WATCHDOG_USEC", "30000000", 1);
    ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
    CHECK(systemd::WatchdogInterval() == microseconds(30000000));
  }
  SECTION("WATCHDOG_PID naming another process: not ours") {
    ::setenv("WATCHDOG_USEC", "200000", 1);
    ::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1);
    CHECK(systemd::WatchdogInterval() == std::nullopt);
  }
  SECTION("malformed or zero WATCHDOG_USEC: no watchdog") {
    ::setenv("WATCHDOG_USEC", GENERATE("soon", "0", "-5", ""), 1);
    CHECK(systemd::WatchdogInterval() == std::nullopt);
  }
  SECTION("the variables stay for a later call") {
    ::setenv("WATCHDOG_USEC", "200000", 1);
    CHECK(systemd::WatchdogInterval().has_value());
    CHECK(systemd::WatchdogInterval().has_value());
  }
}

}  // namespace
}  // namespace kvpeer::daemon
