// OutboundRound: the matching state of one (kv_request_id, round_seq) that
// the server role serves.
//
// A round meets supply and demand. Supply is either the pins taken when the
// peer's lookup hit (a symmetric round, `lookup_supplied`) or blocks of local
// store jobs (a disaggregated-prefill round, bound by the ServerRole). Demand
// is the round's one non-empty fetch. Matched pairs wait in `queue` until the
// connection's writer pulls them as block_data frames.
//
// The round knows nothing about jobs' results, frames or the peer: it only
// keeps the per-round bookkeeping consistent, so that the ServerRole can ask
// "is this round complete" without recounting.
//
// Thread-safety: none; owned by one ServerRole.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <unordered_map>
#include <optional>
#include <vector>

#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::session {

// One matched block waiting to be sent: where it goes, the pinned source,
// and the store job that supplied it (none for a lookup pin).
struct QueuedBlock {
  protocol::SlotIndex dest = 0;
  PinRef pin;
  std::optional<JobId> job;
};

struct OutboundRound {
  // Supply came from this round's lookups. No store can supply such a round,
  // so a demanded key that was not pinned here can never arrive (E34).
  bool lookup_supplied = false;
  // The round's fetch arrived; it is the only one the round accepts (a
  // second is a violation: docs/edge-cases.md, "Fetches on the producer", E32).
  bool has_demand = false;
  // The producer finished the request: when nothing is queued any more, the
  // round ends (failed if demand is still unmatched) instead of waiting for
  // supply that will never come (docs/edge-cases.md, "Stores and finish on
  // the producer", E44-E46).
  bool finishing = false;
  // The round is on the ServerRole's ready list. Keeps that work-list free
  // of duplicates and lets the round be unlisted when it ends early.
  bool scheduled = false;
  // Key bytes charged to this round (ServerConfig::max_round_key_bytes),
  // given back when it ends.
  uint64_t key_bytes = 0;
  // When the round times out (lookup-only: the round timeout; with
  // disaggregated demand: the unsupplied timeout); set exactly when the
  // round is on the ServerRole's deadline list.
  std::optional<TimePoint> deadline;

  // Lookup pins waiting for the round's fetch (no demand yet). Held here so
  // that a slot stays pinned from the hit until the round ends.
  // Hash maps: a round may hold 65,536 keys and is only ever searched by key
  // (an ordered map cost a dozen key compares a lookup: docs/performance.md,
  // "Cheaper keys").
  std::unordered_map<protocol::Key, PinRef> probed;
  // Demand not met yet (PD rounds): key -> every destination asking for it.
  std::unordered_map<protocol::Key, std::vector<protocol::SlotIndex>> unmatched;
  // Matched blocks not yet handed to a frame, in demand order.
  std::deque<QueuedBlock> queue;

  // Records a symmetric round's demand. Every demanded key must have been
  // probed in this round; then all of them are queued and returns true.
  // Otherwise queues nothing (no partial transfer) and returns false. Either
  // way the probed pins that were not demanded are dropped (E38): the demand
  // is final, so they can never be used.
  bool AddSymmetricDemand(const std::vector<protocol::Key>& keys, const std::vector<protocol::SlotIndex>& dests);
  // Records a disaggregated-prefill round's demand; supply comes later.
  void AddPdDemand(const std::vector<protocol::Key>& keys, const std::vector<protocol::SlotIndex>& dests);

  // Whether unmatched demand still waits for `key`.
  bool Wants(const protocol::Key& key) const { return unmatched.contains(key); }
  // Queues `pin` for every destination still waiting for `key`; returns how
  // many blocks were queued (0 when nobody waits for it).
  size_t Offer(const protocol::Key& key, const PinRef& pin, std::optional<JobId> job);

  // Removes and returns up to `max_blocks` (at least 1 when any) queued blocks.
  std::vector<QueuedBlock> TakeBatch(size_t max_blocks);
  // Whether every block the next TakeBatch(max_blocks) returns can be read.
  bool NextBatchReadable(size_t max_blocks) const;
  // The checksums of the next batch, in order (PinnedBlock::Checksum), or
  // nullopt when a block of it is no longer readable.
  std::optional<std::vector<uint64_t>> NextBatchChecksums(size_t max_blocks) const;

  // Every demanded block has been handed to a frame.
  bool Complete() const { return has_demand && unmatched.empty() && queue.empty(); }
};

}  // namespace kvpeer::session
