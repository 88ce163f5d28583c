// Small helpers shared by the benchmark's parts: errors, clocks, percentiles,
// progress lines.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvpeer::bench {

// A benchmark step that could not be carried out (daemon refused, transfer
// failed, bytes wrong). The message says which step and why.
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of the calling thread.
int64_t ThreadCpuNs();
// CPU time of the calling process (all threads).
int64_t ProcessCpuNs();

// Nearest-rank percentile of unsorted samples (q in 0..1); 0 for none.
inline double Percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t rank = static_cast<size_t>(q * static_cast<double>(samples.size()));
  if (rank >= samples.size()) rank = samples.size() - 1;
  return samples[rank];
}

// Errno as text, for messages.
std::string ErrnoText(int error);

// Sleeps the calling thread.
void SleepUs(int64_t us);

// A progress line on stderr with the CLOCK_MONOTONIC time, so that a profile
// recorded with `perf record -k CLOCK_MONOTONIC` can be cut to one phase
// (perf report --time).
void Progress(const std::string& text);

}  // namespace kvpeer::bench
