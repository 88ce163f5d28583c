#include "daemon/control/lookup_wait.h"

#include <utility>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kvpeer::daemon {

void LookupWait::Begin(std::string peer, std::string kv_request_id, std::chrono::steady_clock::time_point deadline) {
  target_ = Target{std::move(peer), std::move(kv_request_id), false};
  timer_.expires_at(deadline);
}

boost::asio::awaitable<LookupWait::Wake> LookupWait::Next() {
  if (cut_) co_return Wake::kCut;
  if (target_ && target_->ended) co_return Wake::kEnded;
  boost::system::error_code ec;  // operation_aborted = woken by an event
  co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
  if (cut_) co_return Wake::kCut;
  if (target_ && target_->ended) co_return Wake::kEnded;
  co_return ec ? Wake::kAnswers : Wake::kTimeout;
}

void LookupWait::OnProbesChanged(const std::string& peer, bool ended) {
  if (!target_ || target_->peer != peer) return;
  target_->ended = target_->ended || ended;
  timer_.cancel();
}

void LookupWait::OnRequestFailed(const std::string& kv_request_id) {
  if (!target_ || target_->kv_request_id != kv_request_id) return;
  target_->ended = true;
  timer_.cancel();
}

void LookupWait::Cut() {
  cut_ = true;
  timer_.cancel();
}

}  // namespace kvpeer::daemon
