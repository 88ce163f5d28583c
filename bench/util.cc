#include "bench/util.h"

#include <time.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

namespace kvpeer::bench {

namespace {

int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace

int64_t ThreadCpuNs() { return ClockNs(CLOCK_THREAD_CPUTIME_ID); }

int64_t ProcessCpuNs() { return ClockNs(CLOCK_PROCESS_CPUTIME_ID); }

std::string ErrnoText(int error) { return std::strerror(error); }

void SleepUs(int64_t us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

void Progress(const std::string& text) {
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%.6f", static_cast<double>(NowNs()) / 1e9);
  std::cerr << "kvpeer-bench: [" << stamp << "] " << text << std::endl;
}

}  // namespace kvpeer::bench
