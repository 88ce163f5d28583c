// LimitReporter: what happens when kvpeerd refuses work because a limit
// (--max-peers, --max-engines, --max-rounds-per-peer, --max-pending-lookups,
// --max-queued-bytes) was reached: the hit is counted in the node's
// Counters under `limit_<name>` (status.counters) and logged as one line
// naming the limit.
//
// A peer or an engine can hit a limit thousands of times a second, so the
// log line is a warning at most once a second per counter (the count of
// hits not logged since is part of it); the others go to the debug log.
// Counting is never rate-limited.
//
// Thread-safety: none; used on the daemon's one event loop.
#pragma once

#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include "daemon/metrics/counters.h"

namespace kvpeer::daemon {

class LimitReporter {
 public:
  // Counts one hit of `counter` (e.g. Counter::kLimitMaxPeers) and logs
  // `message`. A null `counters` only logs.
  void Hit(Counters* counters, Counter counter, const std::string& message) {
    if (counters != nullptr) counters->Add(counter);
    const auto now = std::chrono::steady_clock::now();
    LogState& state = log_[static_cast<size_t>(counter)];
    if (state.logged_once && now - state.last_warn < std::chrono::seconds(1)) {
      ++state.suppressed;
      spdlog::debug("limit reached: {}", message);
      return;
    }
    if (state.suppressed > 0) {
      spdlog::warn("limit reached: {} ({} more {} hits since the last warning, logged at debug level)", message,
                   state.suppressed, CounterName(counter));
    } else {
      spdlog::warn("limit reached: {}", message);
    }
    state.logged_once = true;
    state.last_warn = now;
    state.suppressed = 0;
  }

 private:
  struct LogState {
    bool logged_once = false;
    std::chrono::steady_clock::time_point last_warn{};
    uint64_t suppressed = 0;
  };
  std::array<LogState, kCounterSpecs.size()> log_{};
};

}  // namespace kvpeer::daemon
