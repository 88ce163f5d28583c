// ResultOutbox: where the peer side puts what it owes the engine side (load
// and store results, failed requests, changed probe answers) until the
// current event is over.
//
// The peer side decides results deep inside its own calls: a connection's
// after-step, a resubmission, a sweep of unbound supply, or an engine's own
// Load, Store or Lookup. Handed straight to the EngineRegistry they would run
// engine-session code while that session's Load was still on the stack, so
// every engine op had to record its state before the call in case a result
// arrived during it. Queued here, they reach the engine side
// only when the owner drains the outbox at a known point (PeerManager posts
// one drain per event loop turn), never from inside the call that caused
// them, and in the order they were decided.
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/node/peer_service.h"

namespace kvpeer::daemon {

class ResultOutbox : public ResultSink {
 public:
  // `wake` runs when the outbox goes from empty to holding something: the
  // owner schedules one Drain then. Null = the owner drains by itself.
  explicit ResultOutbox(std::function<void()> wake = nullptr) : wake_(std::move(wake)) {}

  // ResultSink: each call queues its event.
  void OnLoadResult(const session::JobResult& result) override { Push(LoadResult{result}); }
  void OnStoreResult(const session::JobResult& result) override { Push(StoreResult{result}); }
  void OnRequestFailed(const std::string& peer, const std::string& kv_request_id) override {
    Push(RequestFailed{peer, kv_request_id});
  }
  void OnProbesChanged(const std::string& peer, bool ended) override { Push(ProbesChanged{peer, ended}); }

  // Hands every queued event to `sink`, oldest first, including events
  // queued while it runs (the sink may call back into the peer side).
  // Returns how many it handed over.
  size_t Drain(ResultSink& sink);

  bool empty() const { return events_.empty(); }
  size_t size() const { return events_.size(); }

 private:
  struct LoadResult {
    session::JobResult result;
  };
  struct StoreResult {
    session::JobResult result;
  };
  struct RequestFailed {
    std::string peer;
    std::string kv_request_id;
  };
  struct ProbesChanged {
    std::string peer;
    bool ended = false;
  };
  using Event = std::variant<LoadResult, StoreResult, RequestFailed, ProbesChanged>;

  void Push(Event event);
  static void Deliver(ResultSink& sink, const Event& event);

  std::function<void()> wake_;
  std::vector<Event> events_;
  bool draining_ = false;
};

}  // namespace kvpeer::daemon
