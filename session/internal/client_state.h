// The records ClientRole keeps: one per request it drives on this peer, one
// per load from its fetch until its round is retired. Each field says which
// race or rule it exists for. Internal to the client_role*.cc files.
//
// Thread-safety: none; owned by one ClientRole.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "protocol/messages.h"
#include "session/internal/client_load_slots.h"
#include "session/session_types.h"

namespace kvpeer::session::client_detail {

using protocol::Key;
using protocol::RoundSeq;

// A probe's life within one round. kUnsent and kSent are both "retry" to
// the engine; only kSent keys may be answered, since the peer never heard
// of the others.
enum class Probe : uint8_t { kUnsent, kSent, kHit, kMiss };

// Everything the role knows about one kv_request_id on this peer. Created
// lazily, pruned as soon as it is idle (MaybePrune), so nothing leaks.
struct RequestState {
  // The round this request's lookups travel in and its next fetch closes.
  // Opened by the first probe, consumed by the fetch, retired by Finish.
  // Tokens come from the role-wide counter, so a late answer of an older
  // round can never be mistaken for this one (E12).
  std::optional<RoundSeq> open_round;
  // Answers of the open round only. Cleared when the round closes: once the
  // producer has served the fetch it unpins, so a cached hit may be stale
  // and the next load must be probed afresh (E16).
  std::unordered_map<Key, Probe> probes;
  // Probed keys not yet on the wire, in registration order. Non-empty
  // exactly when the request is on the flush work-list.
  std::vector<Key> unsent;
  // The request has probed this peer, so its loads may only name confirmed
  // hits (spec section 6). Kept until Finish even when all else is idle:
  // forgetting it on prune would let a later load skip the hit check as if
  // it were a disaggregated-prefill load.
  bool symmetric = false;
  // A lookup of the open round reached the wire and no fetch closed it: the
  // peer holds lookup state, so Finish owes the terminal empty fetch (I4).
  bool peer_lookup_open = false;
  // Rounds of this request's loads, in flight or aborting; Finish walks them.
  std::set<RoundSeq> loads;

  bool Idle() const { return !symmetric && !open_round && probes.empty() && loads.empty(); }
};

enum class Phase : uint8_t {
  kInFlight,  // fetch sent, result not yet reported
  kAborting,  // abort_fetch sent, result reported (or deferred); awaiting abort_ack
};

// One load, from its fetch until its round is retired.
struct Load {
  Load(JobId job, std::string kv, std::vector<protocol::Key> fetched, LoadSlots destination)
      : job_id(job), kv_request_id(std::move(kv)), keys(std::move(fetched)), slots(std::move(destination)) {}

  JobId job_id;
  std::string kv_request_id;
  std::vector<protocol::Key> keys;  // parallel to the destination slots: names a block in a checksum failure
  LoadSlots slots;
  Phase phase = Phase::kInFlight;
  // When OnTick next has work for this load (its timeout while in flight,
  // its retirement while aborting); set exactly when the load is listed in
  // the deadline work-list.
  std::optional<TimePoint> deadline;
  // The failure of a load ended locally while one of its frames was open.
  // Reported when that payload lands, so no slot is written after its
  // load's result has been reported.
  std::optional<FailureReport> deferred_failure;
  // The retirement deadline passed while a frame was open; the round is
  // retired once that payload has landed (its slots are in use until then).
  bool retire_after_frame = false;

  bool owes_result() const { return phase == Phase::kInFlight || deferred_failure.has_value(); }
};

}  // namespace kvpeer::session::client_detail
