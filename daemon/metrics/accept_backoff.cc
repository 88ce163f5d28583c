#include "daemon/metrics/accept_backoff.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace kvpeer::daemon {

std::chrono::milliseconds AcceptBackoff::Failed(const boost::system::error_code& ec) {
  ++failures_;
  const auto now = std::chrono::steady_clock::now();
  if (!logged_once_ || now - last_log_ >= std::chrono::seconds(1)) {
    spdlog::warn("{}: accept failed: {} ({} more failures since the last line); pausing accepts for {} ms", what_,
                 ec.message(), suppressed_, pause_.count());
    logged_once_ = true;
    last_log_ = now;
    suppressed_ = 0;
    ++logged_;
  } else {
    ++suppressed_;
  }
  const std::chrono::milliseconds pause = pause_;
  pause_ = std::min(pause_ * 2, kMaxPause);
  return pause;
}

}  // namespace kvpeer::daemon
