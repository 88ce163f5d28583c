// ClientRole: a load from its fetch to its one result (transfer_done,
// abort_ack, finish, the load and abort-ack timeouts).
#include <algorithm>
#include <chrono>
#include <utility>

#include "protocol/limits.h"
#include "session/client_role.h"
#include "session/internal/client_role_impl.h"
#include "session/internal/frame_budget.h"

namespace kvpeer::session {
namespace {

using client_detail::HexPrefix;
using client_detail::Load;
using client_detail::Phase;
using client_detail::Probe;
using client_detail::RequestState;
using client_detail::WireSafeId;
using client_detail::WireSafeKey;
using protocol::Key;
using protocol::RoundSeq;

// "30 s" for whole seconds, else milliseconds: reasons are read by people.
std::string FormatDuration(Duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

}  // namespace

Status ClientRole::RequestBlocks(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                                 std::vector<protocol::SlotIndex> block_indexes, SlotSinkRef sink,
                                 std::optional<Duration> timeout) {
  if (Status s = impl_->CheckLoad(job_id, kv_request_id, keys, block_indexes, sink); !s.ok()) return s;
  LoadSlots slots(std::move(sink), block_indexes);
  if (auto dup = slots.duplicate()) {
    return Status::Invalid("destination index " + std::to_string(*dup) + " appears twice in the load");
  }
  RequestState& st = impl_->Request(kv_request_id);
  // The fetch closes the open round; a request with none (PD) opens and
  // closes a fresh one.
  const RoundSeq round = st.open_round ? *st.open_round : impl_->next_round++;
  impl_->CloseRound(kv_request_id, st);
  st.loads.insert(round);
  Load& load = impl_->loads.try_emplace(round, job_id, kv_request_id, keys, std::move(slots)).first->second;
  impl_->Schedule(round, load, impl_->clock() + timeout.value_or(impl_->config.load_timeout));
  impl_->jobs_owing.insert(job_id);
  impl_->Send(protocol::Fetch{kv_request_id, std::move(keys), std::move(block_indexes), round});
  return Status::Ok();
}

Status ClientRole::Impl::CheckLoad(JobId job_id, const std::string& kv, const std::vector<Key>& keys,
                                   const std::vector<protocol::SlotIndex>& indexes, const SlotSinkRef& sink) const {
  if (closed) return Status::Unavailable("the session to " + peer_id + " is closed");
  if (!WireSafeId(kv)) return Status::Invalid("kv_request_id must be 1 ..= 4096 characters");
  if (keys.size() != indexes.size()) {
    return Status::Invalid("keys and block_indexes differ in length: " + std::to_string(keys.size()) + " vs " +
                           std::to_string(indexes.size()));
  }
  if (keys.empty()) return Status::Invalid("a load needs at least one block");
  if (keys.size() > protocol::kMaxListItems) return Status::Invalid("a load may name at most 65536 blocks");
  if (!std::all_of(keys.begin(), keys.end(), WireSafeKey)) return Status::Invalid("keys must be 1 ..= 4096 bytes");
  for (protocol::SlotIndex index : indexes) {
    if (index > protocol::kMaxSlotIndex)
      return Status::Invalid("block index " + std::to_string(index) + " exceeds 2^31 - 1");
  }
  // A load is one fetch, and one fetch closes one round (a second fetch of
  // a round is a violation), so a fetch that would not fit one frame is
  // refused here rather than sent and answered by the peer closing the
  // shared connection (docs/wire-protocol.md, "7.9b Splitting (1.1)").
  size_t header_bytes = 0;
  for (const Key& key : keys) header_bytes += frame_budget::KeyBytes(key) + frame_budget::kBlockIndexBytes;
  if (header_bytes > frame_budget::kKeysBudget) {
    return Status::Invalid("a load's keys would take " + std::to_string(header_bytes) +
                           " header bytes, more than one fetch frame holds (" +
                           std::to_string(frame_budget::kKeysBudget) + "); load fewer or shorter keys at a time");
  }
  if (!sink) return Status::Invalid("a load needs a slot sink");
  if (jobs_owing.contains(job_id)) return Status::Invalid("job id " + std::to_string(job_id) + " is already in flight");
  return CheckConfirmedHits(kv, keys);
}

// A request that probed this peer is symmetric: each key it loads must have
// been answered "hit" in the round the fetch closes, because only those
// blocks are pinned for it on the producer. A request that never probed is
// a disaggregated-prefill load and is served from supply instead.
Status ClientRole::Impl::CheckConfirmedHits(const std::string& kv, const std::vector<Key>& keys) const {
  auto it = requests.find(kv);
  if (it == requests.end() || !it->second.symmetric) return Status::Ok();
  const RequestState& st = it->second;
  if (!st.open_round) {
    return Status::Invalid("kv_request_id " + kv +
                           " probed this peer but has no open lookup round; probe the keys before loading them");
  }
  for (const Key& key : keys) {
    auto probe = st.probes.find(key);
    if (probe == st.probes.end() || probe->second != Probe::kHit) {
      return Status::Invalid("key " + HexPrefix(key) + " is not a confirmed hit of round " +
                             std::to_string(*st.open_round));
    }
  }
  return Status::Ok();
}

// Unlike the seed, which drops in-flight loads without a result (E6), every
// in-flight load fails at once with "request finished": each submitted load
// gets exactly one result, and our role controls every write into its slots,
// so nothing depends on the abort_ack. Loads already aborting got their
// abort_fetch and their result before and get neither again (E7).
void ClientRole::Finish(const std::string& kv_request_id) {
  auto it = impl_->requests.find(kv_request_id);
  if (it == impl_->requests.end()) return;
  RequestState& st = it->second;
  const TimePoint now = impl_->clock();
  for (RoundSeq round : st.loads) {
    Load& load = impl_->loads.at(round);
    if (load.phase == Phase::kInFlight) {
      impl_->EndLoadLocally(round, load, {JobFailure::kRequestFinished, "request finished"}, now);
    }
  }
  // The peer holds lookup state of the open round that no fetch will close:
  // the terminal empty fetch releases it (E8; never owed for probes that
  // were not flushed, E9, nor after a real fetch, E10).
  if (st.peer_lookup_open) impl_->Send(protocol::Fetch{kv_request_id, {}, {}, *st.open_round});
  impl_->CloseRound(kv_request_id, st);
  st.symmetric = false;
  impl_->MaybePrune(kv_request_id);
}

Status ClientRole::OnTransferDone(const protocol::TransferDone& message) {
  Load* load = impl_->FindLoad(message.kv_request_id, message.round_seq);
  // Unknown: a duplicate, or raced with a retirement (E1, E2). Aborting:
  // the load already failed and abort_ack retires the round.
  if (load == nullptr || load->phase == Phase::kAborting) return Status::Ok();
  if (load->slots.frame_open()) return Status::Internal("transfer_done while a block_data payload is being received");
  if (!message.success) {
    impl_->EmitFailure(*load, {JobFailure::kPeerFailed, "peer reported failure"});
  } else if (!load->slots.complete()) {
    impl_->EmitFailure(*load, {JobFailure::kIncomplete,
                               "transfer_done before all blocks arrived: " + std::to_string(load->slots.received()) +
                                   " of " + std::to_string(load->slots.size())});
  } else {
    impl_->EmitSuccess(*load);
  }
  impl_->Retire(message.round_seq);
  return Status::Ok();
}

Status ClientRole::OnAbortAck(const protocol::AbortAck& message) {
  Load* load = impl_->FindLoad(message.kv_request_id, message.round_seq);
  // Only a round we aborted is retired by its ack; anything else is a
  // duplicate or raced with a retirement (E3).
  if (load == nullptr || load->phase != Phase::kAborting) return Status::Ok();
  if (load->slots.frame_open()) {
    load->retire_after_frame = true;
    impl_->Unschedule(message.round_seq, *load);
    return Status::Ok();
  }
  impl_->Retire(message.round_seq);
  return Status::Ok();
}

// Finish and the load timeout end a load on our side: the peer is told to
// stop, and the load fails now because this role controls every write into
// its slots (late frames of the round are discarded until abort_ack).
void ClientRole::Impl::EndLoadLocally(RoundSeq round, Load& load, FailureReport failure, TimePoint now) {
  Send(protocol::AbortFetch{load.kv_request_id, round});
  load.phase = Phase::kAborting;
  Schedule(round, load, now + config.abort_ack_timeout);
  if (load.slots.frame_open()) {
    load.deferred_failure = std::move(failure);
  } else {
    EmitFailure(load, std::move(failure));
  }
}

void ClientRole::Impl::FireDeadline(RoundSeq round, TimePoint now) {
  Load& load = loads.at(round);
  load.deadline.reset();
  if (load.phase == Phase::kInFlight) {
    EndLoadLocally(round, load, {JobFailure::kTimeout, "load timed out after " + FormatDuration(config.load_timeout)},
                   now);
  } else if (load.slots.frame_open()) {
    load.retire_after_frame = true;
  } else {
    // No abort_ack within abort_ack_timeout. The load already failed when it
    // was aborted, so the round is just forgotten; a frame of it arriving
    // later is then a violation.
    Retire(round);
  }
}

// Forgets a round for good: later frames of it are unknown.
void ClientRole::Impl::Retire(RoundSeq round) {
  auto it = loads.find(round);
  if (open_frame_round == round) open_frame_round.reset();
  Unschedule(round, it->second);
  const std::string kv = std::move(it->second.kv_request_id);
  loads.erase(it);
  requests.at(kv).loads.erase(round);
  MaybePrune(kv);
}

}  // namespace kvpeer::session
