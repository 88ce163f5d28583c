#include "daemon/peer/result_outbox.h"

#include <utility>

namespace kvpeer::daemon {

void ResultOutbox::Push(Event event) {
  const bool was_empty = events_.empty();
  events_.push_back(std::move(event));
  // While draining, the running Drain picks the event up: no second wake.
  if (was_empty && !draining_ && wake_) wake_();
}

size_t ResultOutbox::Drain(ResultSink& sink) {
  if (draining_) return 0;  // the outer Drain delivers what is queued now
  draining_ = true;
  size_t delivered = 0;
  while (!events_.empty()) {
    // Taken in batches: what the sink's calls queue comes after them.
    for (const Event& event : std::exchange(events_, {})) {
      Deliver(sink, event);
      ++delivered;
    }
  }
  draining_ = false;
  return delivered;
}

void ResultOutbox::Deliver(ResultSink& sink, const Event& event) {
  if (const auto* load = std::get_if<LoadResult>(&event)) {
    sink.OnLoadResult(load->result);
  } else if (const auto* store = std::get_if<StoreResult>(&event)) {
    sink.OnStoreResult(store->result);
  } else if (const auto* failed = std::get_if<RequestFailed>(&event)) {
    sink.OnRequestFailed(failed->peer, failed->kv_request_id);
  } else if (const auto* probes = std::get_if<ProbesChanged>(&event)) {
    sink.OnProbesChanged(probes->peer, probes->ended);
  }
}

}  // namespace kvpeer::daemon
