// AcceptBackoff: what an accept loop does when accept() fails
// (the control API spec, section 4: "When the process runs out of file
// descriptors"; docs/security.md, "Control socket and engines").
//
// A failed accept on a listening socket that stays readable (EMFILE,
// ENFILE, ENOBUFS, ENOMEM: the pending connection is still queued) would
// make the loop spin and flood the log. Instead the loop waits a short,
// growing pause (10 ms doubling up to 1 s; reset by the next successful
// accept) and logs the condition at most once a second, with the count of
// failures not logged since.
//
// Thread-safety: none; one per accept loop, on the daemon's event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <boost/system/error_code.hpp>

namespace kvpeer::daemon {

class AcceptBackoff {
 public:
  // `what` names the listener in the log line ("control socket").
  explicit AcceptBackoff(std::string what) : what_(std::move(what)) {}

  // Records one failed accept, logs it unless a line was logged within the
  // last second, and returns how long the loop must pause before the next
  // accept.
  std::chrono::milliseconds Failed(const boost::system::error_code& ec);
  // A successful accept: the next failure pauses briefly again.
  void Succeeded() { pause_ = kFirstPause; }

  // Failures seen (tests, diagnostics).
  uint64_t failures() const { return failures_; }
  // Log lines written (tests).
  uint64_t logged() const { return logged_; }

  static constexpr std::chrono::milliseconds kFirstPause{10};
  static constexpr std::chrono::milliseconds kMaxPause{1000};

 private:
  std::string what_;
  std::chrono::milliseconds pause_ = kFirstPause;
  std::chrono::steady_clock::time_point last_log_{};
  bool logged_once_ = false;
  uint64_t failures_ = 0;
  uint64_t suppressed_ = 0;
  uint64_t logged_ = 0;
};

}  // namespace kvpeer::daemon
