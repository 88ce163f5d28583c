// A real kvpeerd process for the client's tests: started on a scratch
// control socket and 127.0.0.1:0, ready once its socket answers `status`,
// stopped with SIGTERM (SIGKILL on request).
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/json/parse.hpp>

#include "kvpeer/client.h"

namespace kvpeer::test {

class DaemonProcess {
 public:
  explicit DaemonProcess(const std::string& name) {
    dir_ = std::filesystem::temp_directory_path() / ("kvpeer-client-test-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "kvpeerd.sock").string();
    std::vector<std::string> args = {KVPEERD_BINARY, "--listen",    "127.0.0.1:0", "--socket",
                                     socket_,        "--log-level", "warn"};
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    if (pid_ < 0) throw std::runtime_error("fork failed");
    WaitReady();
  }
  ~DaemonProcess() {
    Stop(SIGTERM);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  const std::string& socket() const { return socket_; }
  const std::string& listen() const { return listen_; }

  void Stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  void WaitReady() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      Result<Client> client = Client::Connect(socket_);
      if (client.ok()) {
        Result<Answer> status = client.value().Status();
        if (status.ok()) {
          const boost::json::value answer = boost::json::parse(status.value().text());
          listen_ = std::string(answer.at("listen").as_string());
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("kvpeerd did not answer on " + socket_ + " within 20 s");
  }

  std::filesystem::path dir_;
  std::string socket_;
  std::string listen_;
  pid_t pid_ = -1;
};

}  // namespace kvpeer::test
