// AbortTombstones: the rounds a server role has already answered with
// abort_ack.
//
// A consumer that re-sends abort_fetch must not get a second ack (E42), and
// a fetch for an acked round must not reopen it (the ack was its terminal).
// A request's entries go when its terminal empty fetch arrives.
//
// The set is bounded in number (`max_entries`) and in bytes (`max_bytes`:
// each entry is charged its kv_request_id plus kTombstoneOverhead), because
// a peer chooses both how many rounds it aborts and how long their ids are
// (4096 characters at most): 4096 entries of such ids alone held 32 MB a
// session (issue 11, finding 4). Past either bound the oldest go first.
//
// Why evicting is safe: a tombstone only guards against a misbehaving
// consumer. A correct one sends one abort_fetch per round and never a fetch
// after it (wire-protocol.md section 6, "abort_fetch"), so it never meets a
// tombstone at all; a re-sent abort follows the first within seconds, long
// before a megabyte of other aborts. A peer that outruns the bound only
// gets, for its own evicted rounds, what it asked for: a second abort_ack
// (which its client role must ignore or treat as its own violation), or a
// fetch that opens a new disaggregated round, bounded like any other round
// (the round limits and the unsupplied timeout). Nothing of another peer or
// of an engine depends on these entries.
//
// Thread-safety: none; owned by one ServerRole.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <utility>

#include "protocol/messages.h"

namespace kvpeer::session {

// The fixed charge of one tombstone beyond its id's bytes: the set node, its
// string header and the eviction-order entry.
inline constexpr uint64_t kTombstoneOverhead = 96;

class AbortTombstones {
 public:
  using RoundKey = std::pair<std::string, protocol::RoundSeq>;

  static constexpr size_t kDefaultMaxEntries = 4096;
  static constexpr uint64_t kDefaultMaxBytes = 1ull * 1024 * 1024;

  explicit AbortTombstones(size_t max_entries = kDefaultMaxEntries, uint64_t max_bytes = kDefaultMaxBytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  bool Contains(const RoundKey& key) const { return set_.contains(key); }

  void Insert(const RoundKey& key) {
    auto [it, fresh] = set_.insert(key);
    if (!fresh) return;
    order_.push_back(it);
    bytes_ += ChargeOf(key);
    // The newest entry always stays, even if it alone passes max_bytes.
    while (order_.size() > 1 && (order_.size() > max_entries_ || bytes_ > max_bytes_)) EvictOldest();
  }

  void EraseRequest(const std::string& kv_request_id) {
    std::erase_if(order_, [&](Entry entry) { return entry->first == kv_request_id; });
    auto it = set_.lower_bound(RoundKey{kv_request_id, 0});
    while (it != set_.end() && it->first == kv_request_id) {
      bytes_ -= ChargeOf(*it);
      it = set_.erase(it);
    }
  }

  size_t size() const { return set_.size(); }
  // What the entries are charged together (what max_bytes bounds).
  uint64_t bytes() const { return bytes_; }

 private:
  // Set iterators stay valid until their element is erased, so the order
  // holds no second copy of the ids.
  using Entry = std::set<RoundKey>::const_iterator;

  static uint64_t ChargeOf(const RoundKey& key) { return key.first.size() + kTombstoneOverhead; }

  void EvictOldest() {
    bytes_ -= ChargeOf(*order_.front());
    set_.erase(order_.front());
    order_.pop_front();
  }

  size_t max_entries_;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  std::set<RoundKey> set_;
  std::deque<Entry> order_;  // insertion order, for eviction
};

}  // namespace kvpeer::session
