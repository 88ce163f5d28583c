// LookupWait: the `lookup` with `wait_ms` an engine session has waiting
// (docs/control-api.md, "Engine operations", the `lookup` row).
//
// A control connection answers its requests in order, so a session waits
// for at most one lookup at a time: this one slot is the whole bound, and
// nothing an engine or a peer sends can grow it. The wait is woken by
// events, never by polling: a lookup_resp from the waited-on peer, the end
// of that peer's session or of the request there, or the session's waits
// being cut (end of input, engine gone).
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

namespace kvpeer::daemon {

class LookupWait {
 public:
  // Why Next() returned.
  enum class Wake {
    kTimeout,  // wait_ms has passed
    kAnswers,  // a lookup_resp from the peer arrived
    kEnded,    // the peer's session or the request there ended
    kCut,      // waits are cut: answer at once
  };

  explicit LookupWait(const boost::asio::any_io_executor& executor) : timer_(executor) {}

  // Starts waiting for (peer, kv_request_id) until `deadline`.
  // REQUIRES: no wait is open.
  void Begin(std::string peer, std::string kv_request_id, std::chrono::steady_clock::time_point deadline);
  // The next event of the open wait (events before the call count).
  boost::asio::awaitable<Wake> Next();
  // Closes the open wait.
  void End() { target_.reset(); }

  // From the peer side: answers from `peer` may have changed; `ended` when
  // its session ended.
  void OnProbesChanged(const std::string& peer, bool ended);
  // The request failed on a peer as a whole.
  void OnRequestFailed(const std::string& kv_request_id);
  // From now on Next() returns kCut at once.
  void Cut();

 private:
  struct Target {
    std::string peer;
    std::string kv_request_id;
    bool ended = false;
  };

  boost::asio::steady_timer timer_;
  std::optional<Target> target_;
  bool cut_ = false;
};

}  // namespace kvpeer::daemon
