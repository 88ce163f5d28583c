#include "bench/daemon_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <boost/json/serialize.hpp>

#include "bench/engine_client.h"
#include "bench/util.h"

namespace kvpeer::bench {

DaemonProcess::DaemonProcess(DaemonOptions options) : options_(std::move(options)) {}

DaemonProcess::~DaemonProcess() { Stop(); }

void DaemonProcess::Start() {
  std::vector<std::string> args;
  for (size_t at = 0; at < options_.wrapper.size();) {
    const size_t space = options_.wrapper.find(' ', at);
    const size_t end = space == std::string::npos ? options_.wrapper.size() : space;
    if (end > at) args.push_back(options_.wrapper.substr(at, end - at));
    at = end + 1;
  }
  const std::vector<std::string> own = {options_.binary,
                                        "--listen",
                                        "127.0.0.1:0",
                                        "--socket",
                                        options_.socket_path,
                                        "--block-len",
                                        std::to_string(options_.block_len),
                                        "--config-fingerprint",
                                        "kvpeer-bench",
                                        "--hash-seed",
                                        "bench-seed"};
  args.insert(args.end(), own.begin(), own.end());
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();

  const pid_t child = ::fork();
  if (child < 0) throw BenchError("fork: " + ErrnoText(errno));
  if (child == 0) {
    // Only async-signal-safe calls from here to exec.
    ::setpgid(0, 0);  // its own group: Stop() reaches a wrapper's children too
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    const int log = ::open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log >= 0) {
      ::dup2(log, STDOUT_FILENO);
      ::dup2(log, STDERR_FILENO);
    }
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(child, child);  // as in the child: whichever runs first
  pid_ = child;

  // Ready once the control socket answers status (it is created after the
  // TCP listener is bound, so status already shows the real port).
  const int64_t start_limit_s = options_.wrapper.empty() ? 10 : 120;
  const int64_t deadline = NowNs() + start_limit_s * 1000000000;
  for (;;) {
    int wstatus = 0;
    if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      throw BenchError("kvpeerd exited during start-up (status " + std::to_string(wstatus) + "): " + LogTail());
    }
    try {
      EngineClient client(options_.socket_path);
      auto status = client.Call(request::Status(), "status");
      const auto* listen = status.if_contains("listen");
      if (listen == nullptr || !listen->is_string()) throw BenchError("status without listen");
      listen_ = std::string(listen->get_string());
      return;
    } catch (const BenchError&) {
      if (NowNs() > deadline) {
        Stop();
        throw BenchError("kvpeerd did not answer on " + options_.socket_path + " within " +
                         std::to_string(start_limit_s) + " s: " + LogTail());
      }
      SleepUs(5000);
    }
  }
}

void DaemonProcess::SignalStop() {
  if (pid_ <= 0 || signalled_) return;
  // The daemon's own process group (set up in Start), so that a wrapper
  // such as strace does not leave the daemon running.
  ::kill(-pid_, SIGTERM);
  signalled_ = true;
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return -1;
  SignalStop();
  int wstatus = 0;
  const int64_t deadline = NowNs() + (options_.wrapper.empty() ? 10 : 60) * int64_t{1000000000};
  for (;;) {
    const pid_t done = ::waitpid(pid_, &wstatus, WNOHANG);
    if (done == pid_ || (done < 0 && errno == ECHILD)) break;
    if (NowNs() > deadline) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &wstatus, 0);
      break;
    }
    SleepUs(2000);
  }
  pid_ = -1;
  signalled_ = false;
  return wstatus;
}

int64_t DaemonProcess::CpuNs() const { return ProcCpuNs(pid_); }
int64_t DaemonProcess::RssAnonKb() const { return ProcStatusKb(pid_, "RssAnon"); }
int64_t DaemonProcess::RssKb() const { return ProcStatusKb(pid_, "VmRSS"); }
int64_t DaemonProcess::VoluntarySwitches() const { return ProcStatusKb(pid_, "voluntary_ctxt_switches"); }

std::string DaemonProcess::LogTail() const {
  std::ifstream in(options_.log_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) out += "\n  | " + lines[i];
  return out.empty() ? std::string("(log " + options_.log_path + " is empty)") : out;
}

void StopTogether(DaemonProcess& first, DaemonProcess& second) {
  first.SignalStop();
  second.SignalStop();
  second.Stop();
  first.Stop();
}

DaemonOptions WithFiles(DaemonOptions daemon, const std::string& stem) {
  daemon.socket_path = stem + ".sock";
  daemon.log_path = stem + ".log";
  return daemon;
}

int64_t ProcCpuNs(pid_t pid) {
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  int64_t total = 0;
  bool precise = false;
  if (DIR* dir = ::opendir(task_dir.c_str())) {
    precise = true;
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      std::ifstream in(task_dir + "/" + entry->d_name + "/sched");
      bool found = false;
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("se.sum_exec_runtime", 0) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) break;
        // Milliseconds with six decimals: parse both parts exactly.
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(' '));
        const size_t dot = value.find('.');
        int64_t ms = std::atoll(value.substr(0, dot).c_str());
        int64_t frac = 0;
        if (dot != std::string::npos) {
          std::string digits = value.substr(dot + 1, 6);
          while (digits.size() < 6) digits.push_back('0');
          frac = std::atoll(digits.c_str());
        }
        total += ms * 1000000 + frac;
        found = true;
        break;
      }
      if (!found) precise = false;
    }
    ::closedir(dir);
  }
  if (precise) return total;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) {
      stime = std::atoll(field.c_str());
      break;
    }
  }
  const int64_t ticks = ::sysconf(_SC_CLK_TCK);
  return (utime + stime) * (1000000000 / (ticks > 0 ? ticks : 100));
}

int64_t ProcStatusKb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  }
  return -1;
}

}  // namespace kvpeer::bench
