// AbortTombstones: the rounds a server role has already answered with
// abort_ack.
//
// A consumer that re-sends abort_fetch must not get a second ack (E42), and
// a fetch for an acked round must not reopen it (the ack was its terminal).
// The set is bounded: a request's entries go when its terminal empty fetch
// arrives, and past `capacity` the oldest go first (a re-sent abort follows
// the first within seconds, long before thousands of other aborts).
//
// Thread-safety: none; owned by one ServerRole.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <set>
#include <string>
#include <utility>

#include "protocol/messages.h"

namespace kvpeer::session {

class AbortTombstones {
 public:
  using RoundKey = std::pair<std::string, protocol::RoundSeq>;

  explicit AbortTombstones(size_t capacity = 4096) : capacity_(capacity) {}

  bool Contains(const RoundKey& key) const { return set_.contains(key); }

  void Insert(const RoundKey& key) {
    if (!set_.insert(key).second) return;
    order_.push_back(key);
    if (order_.size() <= capacity_) return;
    set_.erase(order_.front());
    order_.pop_front();
  }

  void EraseRequest(const std::string& kv_request_id) {
    std::erase_if(order_, [&](const RoundKey& key) { return key.first == kv_request_id; });
    auto it = set_.lower_bound(RoundKey{kv_request_id, 0});
    while (it != set_.end() && it->first == kv_request_id) it = set_.erase(it);
  }

  size_t size() const { return set_.size(); }

 private:
  size_t capacity_;
  std::set<RoundKey> set_;
  std::deque<RoundKey> order_;  // insertion order, for eviction
};

}  // namespace kvpeer::session
