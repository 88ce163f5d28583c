// A kvpeerd child process of the benchmark: started with fork/exec on
// 127.0.0.1:0 with its own control socket, asked for its real listen address,
// measured through /proc, stopped with SIGTERM.
//
// The child gets PR_SET_PDEATHSIG(SIGTERM), so a benchmark that dies
// abruptly does not leave daemons behind. Its stderr goes to a log file in
// the benchmark's scratch directory.
//
// Thread-safety: methods of one object from one thread; the /proc readers
// may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvpeer::bench {

struct DaemonOptions {
  std::string binary;       // path of kvpeerd
  std::string socket_path;  // control socket
  std::string log_path;     // stderr goes here
  uint64_t block_len = 0;
  std::vector<std::string> extra_args;
  // Run the daemon under this command (e.g. valgrind), split on spaces.
  std::string wrapper;
};

class DaemonProcess {
 public:
  explicit DaemonProcess(DaemonOptions options);
  ~DaemonProcess();  // Stop()
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Starts the daemon and waits until its control socket answers `status`;
  // throws BenchError with the log's tail when it does not come up.
  void Start();
  // SIGTERM, then waits up to 10 s (SIGKILL after that). Returns the exit
  // status (as from waitpid) or -1 when it was not running.
  int Stop();
  // Only the SIGTERM of Stop(): a daemon drains for 0.5 s after it, so
  // signalling several daemons before stopping them waits once, not once
  // per daemon.
  void SignalStop();

  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return options_.socket_path; }
  // The real "host:port" from `status`.
  const std::string& listen() const { return listen_; }

  // CPU time of all of the daemon's threads so far, in nanoseconds.
  int64_t CpuNs() const;
  // Resident anonymous memory (heap, stacks; not the mapped engine regions)
  // and the whole resident set, in KiB.
  int64_t RssAnonKb() const;
  int64_t RssKb() const;
  // Voluntary context switches of the main thread so far (each is a sleep
  // in epoll_wait and a wake-up).
  int64_t VoluntarySwitches() const;
  // The last lines of the daemon's log.
  std::string LogTail() const;

 private:
  DaemonOptions options_;
  pid_t pid_ = -1;
  bool signalled_ = false;
  std::string listen_;
};

// Signals both before waiting for either, so that their drains overlap.
void StopTogether(DaemonProcess& first, DaemonProcess& second);
// `daemon` with its control socket at `stem`.sock and its log at `stem`.log.
DaemonOptions WithFiles(DaemonOptions daemon, const std::string& stem);

// CPU time of process `pid` (all threads) in ns: the sum of the threads'
// se.sum_exec_runtime from /proc/PID/task/*/sched when the kernel exposes it
// (nanosecond resolution), else utime+stime from /proc/PID/stat (ticks).
int64_t ProcCpuNs(pid_t pid);
// A "Key:   N kB" field of /proc/PID/status, in KiB; -1 when absent.
int64_t ProcStatusKb(pid_t pid, const std::string& key);

}  // namespace kvpeer::bench
