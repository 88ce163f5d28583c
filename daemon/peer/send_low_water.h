// SendLowWater: how many unsent bytes the kernel may hold for one peer
// socket (TCP_NOTSENT_LOWAT), bounded only while lookups or their answers
// go out on it (docs/performance.md, "Lookups during bulk").
//
// A lookup_resp queued behind bulk data waits for everything the kernel
// already holds unsent, up to the autotuned send buffer (4 MiB here): a
// bound keeps that to kBoundBytes. But a bounded socket wakes its writer
// about every half bound (the kernel's rule for reporting it writable),
// several times per 1 MiB frame, and that costs a stream that carries only
// data 10-20% more CPU than the raw sender. So the bound is on while
// latency-sensitive frames were queued in the last kQuietTime, and off
// otherwise (the kernel's default).
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <chrono>

namespace kvpeer::daemon {

class SendLowWater {
 public:
  using Clock = std::chrono::steady_clock;

  static constexpr int kBoundBytes = 512 * 1024;
  static constexpr auto kQuietTime = std::chrono::milliseconds(100);

  // A lookup or lookup_resp is queued on socket `fd` at `now`.
  void OnLatencyFrame(int fd, Clock::time_point now);
  // A data frame is queued on socket `fd` at `now`.
  void OnDataFrame(int fd, Clock::time_point now);
  bool bounded() const { return bounded_; }

 private:
  void Set(int fd, bool bounded);

  bool bounded_ = false;
  Clock::time_point last_latency_frame_{};
};

}  // namespace kvpeer::daemon
