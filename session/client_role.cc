#include "session/client_role.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/hex.h"
#include "protocol/codec.h"
#include "protocol/limits.h"
#include "session/internal/client_load_slots.h"
#include "session/internal/client_state.h"
#include "session/internal/frame_budget.h"

namespace kvpeer::session {
namespace {

using client_detail::Load;
using client_detail::Phase;
using client_detail::Probe;
using client_detail::RequestState;
using protocol::Key;
using protocol::RoundSeq;

constexpr char kSlotsUnmapped[] = "a destination slot is no longer mapped (engine region truncated?)";

// "30 s" for whole seconds, else milliseconds: reasons are read by people.
std::string FormatDuration(Duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

// Enough of a key to find it in a log, never the whole 4 KiB.
std::string HexPrefix(const Key& key) {
  constexpr size_t kShownBytes = 8;
  std::string out = ToHex(std::string_view(key).substr(0, kShownBytes));
  if (key.size() > kShownBytes) out += "...";
  return out;
}

// Whether a value can travel on the wire at all; the peer would otherwise
// close the whole connection over one engine's bad input.
bool WireSafeId(const std::string& id) { return !id.empty() && id.size() <= protocol::kMaxStringChars; }
bool WireSafeKey(const Key& key) { return !key.empty() && key.size() <= protocol::kMaxKeyBytes; }

}  // namespace

struct ClientRole::Impl {
  Impl(std::string peer, ClientConfig cfg, Clock clk, SendFn snd)
      : peer_id(std::move(peer)), config(cfg), clock(std::move(clk)), send(std::move(snd)) {}

  std::string peer_id;  // the peer this role fetches from (for debugging)
  ClientConfig config;
  Clock clock;
  SendFn send;

  // The session-wide round counter: every new round takes the next value,
  // so a token is never reused on the connection, not even after a request
  // was pruned and its id came back (docs/edge-cases.md, E56). A uint64 counter
  // cannot wrap in practice (2^64 rounds at one per nanosecond is 584 years).
  RoundSeq next_round = 0;
  std::unordered_map<std::string, RequestState> requests;
  // Requests with unsent probes: the flush visits only these, never every
  // request. Ordered so lookups leave in a reproducible order.
  std::set<std::string> flush_pending;
  // Every load whose round is not retired, by its session-unique round.
  std::unordered_map<RoundSeq, Load> loads;
  // The timeout work-list: (deadline, round) of every load with a deadline,
  // earliest first, so OnTick and NextDeadline touch only what is due.
  std::set<std::pair<TimePoint, RoundSeq>> deadlines;
  // Jobs still owed a result; rejects a job id submitted twice.
  std::unordered_set<JobId> jobs_owing;
  std::vector<JobResult> results;
  std::vector<ChecksumFailure> checksum_failures;
  bool checksums = false;  // the xxh3 feature is on
  // The round whose block_data payload is being received, if any (one
  // frame is open at a time per connection).
  std::optional<RoundSeq> open_frame_round;
  bool closed = false;

  RequestState& Request(const std::string& kv) { return requests[kv]; }

  void MaybePrune(const std::string& kv) {
    auto it = requests.find(kv);
    if (it != requests.end() && it->second.Idle()) requests.erase(it);
  }

  Load* FindLoad(const std::string& kv, RoundSeq round) {
    auto it = loads.find(round);
    return it == loads.end() || it->second.kv_request_id != kv ? nullptr : &it->second;
  }

  void Schedule(RoundSeq round, Load& load, TimePoint at) {
    Unschedule(round, load);
    load.deadline = at;
    deadlines.emplace(at, round);
  }

  void Unschedule(RoundSeq round, Load& load) {
    if (load.deadline) deadlines.erase({*load.deadline, round});
    load.deadline.reset();
  }

  void Send(protocol::Message message) { send(OutFrame{std::move(message), {}}); }

  void EmitSuccess(Load& load) {
    jobs_owing.erase(load.job_id);
    results.push_back(JobResult{load.job_id, load.kv_request_id, true, {}});
  }
  void EmitFailure(Load& load, FailureReport failure) {
    jobs_owing.erase(load.job_id);
    results.push_back(JobResult{load.job_id, load.kv_request_id, false, std::move(failure.reason), failure.cause});
  }

  // Ends the open round of a request: its probes go with it.
  void CloseRound(const std::string& kv, RequestState& st) {
    st.open_round.reset();
    st.peer_lookup_open = false;
    st.probes.clear();
    st.unsent.clear();
    flush_pending.erase(kv);
  }

  Status CheckLoad(JobId job_id, const std::string& kv, const std::vector<Key>& keys,
                   const std::vector<protocol::SlotIndex>& indexes, const SlotSinkRef& sink) const;
  Status CheckConfirmedHits(const std::string& kv, const std::vector<Key>& keys) const;
  size_t SendLookups(const std::string& kv, RequestState& st);
  void EndLoadLocally(RoundSeq round, Load& load, FailureReport failure, TimePoint now);
  void FireDeadline(RoundSeq round, TimePoint now);
  void Retire(RoundSeq round);
  void AfterFrame(RoundSeq round, Load& load);
  bool OwesEngine(const RequestState& st) const;
  void TakeUnservedLoads(RequestState& st, std::vector<UnservedLoad>* out);
  void TakeUnansweredProbes(const std::string& kv, RequestState& st, std::vector<UnservedProbes>* out);
  std::optional<FailureReport> CheckLanded(const protocol::BlockData& message, Load& load);
};

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

size_t ClientRole::Impl::SendLookups(const std::string& kv, RequestState& st) {
  for (const Key& key : st.unsent) st.probes.at(key) = Probe::kSent;
  size_t sent = 0;
  // One lookup normally; more when the keys exceed one message's list limit
  // or header budget (wire spec section 6). Every part carries the open
  // round: lookups of one round may be several (docs/wire-protocol.md, "7.1 Rounds"), each is
  // answered on its own, and answers match by (round, key), so a probe
  // split in parts still gets exactly one answer a key.
  size_t begin = 0;
  while (begin < st.unsent.size()) {
    size_t end = begin;
    size_t bytes = 0;
    while (end < st.unsent.size() && end - begin < protocol::kMaxListItems) {
      const size_t more = frame_budget::KeyBytes(st.unsent[end]);
      if (end > begin && bytes + more > frame_budget::kKeysBudget) break;
      bytes += more;
      ++end;
    }
    std::vector<Key> keys(std::make_move_iterator(st.unsent.begin() + static_cast<std::ptrdiff_t>(begin)),
                          std::make_move_iterator(st.unsent.begin() + static_cast<std::ptrdiff_t>(end)));
    Send(protocol::Lookup{kv, std::move(keys), *st.open_round});
    ++sent;
    begin = end;
  }
  st.unsent.clear();
  st.peer_lookup_open = true;
  return sent;
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

// Hits the producer pinned for the open round die with the session (it
// unpins on close), and a new session would take a load of them for a
// disaggregated-prefill load that waits out the load timeout. The reference
// reports only loads and unresolved probes (E61); we report these too, so
// the engine learns at once that it must recompute.
namespace {
bool HoldsConfirmedHits(const RequestState& st) {
  if (!st.open_round) return false;
  return std::any_of(st.probes.begin(), st.probes.end(), [](const auto& probe) { return probe.second == Probe::kHit; });
}
}  // namespace

// The engine would wait forever on this request if the session died now.
bool ClientRole::Impl::OwesEngine(const RequestState& st) const {
  for (RoundSeq round : st.loads)
    if (loads.at(round).owes_result()) return true;
  for (const auto& [key, probe] : st.probes)
    if (probe == Probe::kUnsent || probe == Probe::kSent) return true;
  return false;
}

// Nothing of such a load reached its slots or is on its way there, and a
// disaggregated fetch names no round the peer pinned anything for, so the
// same fetch over another connection is the same request. A symmetric
// load is never handed back: its hits were pinned for this connection's
// round, which dies with it.
void ClientRole::Impl::TakeUnservedLoads(RequestState& st, std::vector<UnservedLoad>* out) {
  for (auto round_it = st.loads.begin(); round_it != st.loads.end();) {
    const RoundSeq round = *round_it;
    Load& load = loads.at(round);
    if (load.phase != Phase::kInFlight || load.slots.received() != 0 || load.slots.frame_open()) {
      ++round_it;
      continue;
    }
    out->push_back(
        UnservedLoad{load.job_id, load.kv_request_id, std::move(load.keys), load.slots.indexes(), load.slots.sink()});
    Unschedule(round, load);
    jobs_owing.erase(load.job_id);
    loads.erase(round);
    round_it = st.loads.erase(round_it);
  }
}

// A request with a hit or a load here fails as a whole when the session
// closes (its pins die with it); only one that merely waits for answers
// can ask again elsewhere without the engine noticing.
void ClientRole::Impl::TakeUnansweredProbes(const std::string& kv, RequestState& st, std::vector<UnservedProbes>* out) {
  if (!st.loads.empty() || HoldsConfirmedHits(st)) return;
  UnservedProbes probes{kv, {}};
  for (const auto& [key, probe] : st.probes) {
    if (probe == Probe::kUnsent || probe == Probe::kSent) probes.keys.push_back(key);
  }
  CloseRound(kv, st);
  if (!probes.keys.empty()) out->push_back(std::move(probes));
}

ClientRole::ClientRole(std::string peer_id, ClientConfig config, Clock clock, SendFn send)
    : impl_(std::make_unique<Impl>(std::move(peer_id), config, std::move(clock), std::move(send))) {}

ClientRole::~ClientRole() = default;

ProbeAnswer ClientRole::RegisterLookup(const std::string& kv_request_id, const protocol::Key& key) {
  // Nothing can answer a probe that cannot be asked: a miss, never a hang.
  if (impl_->closed || !WireSafeId(kv_request_id) || !WireSafeKey(key)) return ProbeAnswer::kMiss;
  RequestState& st = impl_->Request(kv_request_id);
  st.symmetric = true;
  if (!st.open_round) st.open_round = impl_->next_round++;
  auto [it, added] = st.probes.try_emplace(key, Probe::kUnsent);
  if (added) {
    st.unsent.push_back(key);
    impl_->flush_pending.insert(kv_request_id);
    return ProbeAnswer::kRetry;
  }
  if (it->second == Probe::kHit) return ProbeAnswer::kHit;
  if (it->second == Probe::kMiss) return ProbeAnswer::kMiss;
  return ProbeAnswer::kRetry;
}

size_t ClientRole::FlushPendingLookups() {
  size_t sent = 0;
  for (const std::string& kv : impl_->flush_pending) sent += impl_->SendLookups(kv, impl_->requests.at(kv));
  impl_->flush_pending.clear();
  return sent;
}

size_t ClientRole::ProbesWith(const std::string& kv_request_id, const std::vector<protocol::Key>& keys) const {
  auto it = impl_->requests.find(kv_request_id);
  // Without an open round the next RegisterLookup opens a fresh, empty one.
  const auto* probes = it != impl_->requests.end() && it->second.open_round ? &it->second.probes : nullptr;
  std::unordered_set<std::string_view> fresh;
  for (const Key& key : keys) {
    if (probes == nullptr || !probes->contains(key)) fresh.insert(key);
  }
  return (probes != nullptr ? probes->size() : 0) + fresh.size();
}

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

void ClientRole::OnLookupResp(const protocol::LookupResp& message) {
  auto it = impl_->requests.find(message.kv_request_id);
  if (it == impl_->requests.end()) return;
  RequestState& st = it->second;
  // An answer for a closed round is stale even if the key was probed again
  // since: the producer may have unpinned the block in between (E12).
  if (st.open_round != message.round_seq) return;
  const size_t n = std::min(message.keys.size(), message.hits.size());
  for (size_t i = 0; i < n; ++i) {
    auto probe = st.probes.find(message.keys[i]);
    // Only keys asked in this round and not answered yet: a second answer
    // must not flip a hit the engine may already have acted on (E13).
    if (probe != st.probes.end() && probe->second == Probe::kSent) {
      probe->second = message.hits[i] ? Probe::kHit : Probe::kMiss;
    }
  }
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

Status ClientRole::OnBlockDataHeader(const protocol::BlockData& message, BlockDataPlan* plan) {
  plan->discard = false;
  plan->targets.clear();
  if (impl_->closed) return Status::Unavailable("the session to " + impl_->peer_id + " is closed");
  if (impl_->checksums && !message.xxh3.valid()) {
    // Even for a frame we would drop: the peer broke the negotiated format.
    if (message.xxh3.state == protocol::BlockChecksums::State::kAbsent) {
      return Status::FieldViolation("block_data.xxh3", "is required while the xxh3 feature is on");
    }
    return Status::Violation("block_data." + message.xxh3.problem);
  }
  const std::string context =
      "block_data for kv_request_id " + message.kv_request_id + " round " + std::to_string(message.round_seq) + ": ";
  Load* load = impl_->FindLoad(message.kv_request_id, message.round_seq);
  if (load == nullptr) return Status::Violation(context + "no load of this round is in flight");
  if (load->slots.frame_open()) return Status::Internal(context + "header before the previous payload landed");
  if (load->phase == Phase::kAborting) {
    // The peer may have sent it before it saw our abort_fetch.
    plan->discard = true;
    return Status::Ok();
  }
  if (message.block_indexes.empty()) return Status::Violation(context + "no block index");
  if (!load->slots.writable()) {
    // The engine truncated its region: the load fails and this frame is
    // dropped; the connection and its other loads carry on.
    impl_->EndLoadLocally(message.round_seq, *load, {JobFailure::kSlotsUnmapped, kSlotsUnmapped}, impl_->clock());
    plan->discard = true;
    return Status::Ok();
  }
  Status status = load->slots.BeginFrame(message.block_indexes, plan, context);
  if (status.ok()) impl_->open_frame_round = message.round_seq;
  return status;
}

void ClientRole::OnBlockDataComplete(const protocol::BlockData& message) {
  Load* load = impl_->FindLoad(message.kv_request_id, message.round_seq);
  if (load == nullptr || !load->slots.frame_open()) return;  // a discarded or abandoned frame
  impl_->open_frame_round.reset();
  std::optional<FailureReport> failure = impl_->CheckLanded(message, *load);
  if (failure) {
    // The slots hold the bytes now, so the failure is reported at once.
    load->slots.DropFrame();
    if (load->phase == Phase::kInFlight)
      impl_->EndLoadLocally(message.round_seq, *load, std::move(*failure), impl_->clock());
  } else {
    load->slots.EndFrame();
  }
  impl_->AfterFrame(message.round_seq, *load);
}

// Why the landed frame must not count (a block whose bytes do not match what
// the producer hashed, or slots whose memory is gone), or nullopt.
std::optional<FailureReport> ClientRole::Impl::CheckLanded(const protocol::BlockData& message, Load& load) {
  if (!checksums) return std::nullopt;
  for (size_t i = 0; i < message.block_indexes.size(); ++i) {
    const protocol::SlotIndex index = message.block_indexes[i];
    const std::optional<uint64_t> landed = load.slots.LandedChecksum(index);
    if (!landed) return FailureReport{JobFailure::kSlotsUnmapped, kSlotsUnmapped};
    const uint64_t expected = message.xxh3.values[i];
    if (*landed == expected) continue;
    const Key& key = load.keys[load.slots.PositionOf(index)];
    checksum_failures.push_back(ChecksumFailure{load.kv_request_id, key, index, expected, *landed});
    return FailureReport{JobFailure::kChecksum,
                         "checksum mismatch on block " + std::to_string(index) + " (key " + HexPrefix(key) +
                             "): the peer sent xxh3 " + protocol::ChecksumHex(expected) +
                             ", the bytes that landed hash to " + protocol::ChecksumHex(*landed)};
  }
  return std::nullopt;
}

void ClientRole::EnableChecksums() { impl_->checksums = true; }

std::vector<ChecksumFailure> ClientRole::TakeChecksumFailures() { return std::exchange(impl_->checksum_failures, {}); }

bool ClientRole::OpenFrameAbandoned() const {
  if (!impl_->open_frame_round) return false;
  const Load& load = impl_->loads.at(*impl_->open_frame_round);
  return load.deferred_failure.has_value() || load.retire_after_frame;
}

void ClientRole::FailOpenFrame(const std::string& reason) {
  if (!impl_->open_frame_round) return;
  const RoundSeq round = *impl_->open_frame_round;
  Load& load = impl_->loads.at(round);
  if (load.phase == Phase::kInFlight) {
    impl_->EndLoadLocally(round, load, {JobFailure::kSlotsUnmapped, reason}, impl_->clock());
  }
  AbandonOpenFrame();
}

void ClientRole::AbandonOpenFrame() {
  if (!OpenFrameAbandoned()) return;
  const RoundSeq round = *std::exchange(impl_->open_frame_round, std::nullopt);
  Load& load = impl_->loads.at(round);
  load.slots.DropFrame();
  impl_->AfterFrame(round, load);
}

// The open frame of `load` is over (landed or abandoned): what waited for it
// happens now.
void ClientRole::Impl::AfterFrame(RoundSeq round, Load& load) {
  if (load.deferred_failure) {
    FailureReport failure = std::move(*load.deferred_failure);
    load.deferred_failure.reset();
    EmitFailure(load, std::move(failure));
  }
  if (load.retire_after_frame) Retire(round);
}

void ClientRole::OnTick() {
  const TimePoint now = impl_->clock();
  auto& deadlines = impl_->deadlines;
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    const RoundSeq round = deadlines.begin()->second;
    deadlines.erase(deadlines.begin());
    impl_->FireDeadline(round, now);
  }
}

std::optional<TimePoint> ClientRole::NextDeadline() const {
  if (impl_->deadlines.empty()) return std::nullopt;
  return impl_->deadlines.begin()->first;
}

std::vector<JobResult> ClientRole::TakeResults() { return std::exchange(impl_->results, {}); }

ClientCloseResult ClientRole::Close(const std::string& reason, JobFailure cause) {
  ClientCloseResult out;
  if (impl_->closed) return out;
  impl_->closed = true;
  // The daemon has closed the socket, so no payload lands after this: loads
  // with a deferred result can be reported now, like those in flight.
  for (const auto& [round, load] : impl_->loads) {
    if (load.owes_result()) {
      out.failed_loads.push_back(JobResult{load.job_id, load.kv_request_id, false, reason, cause});
    }
  }
  for (const auto& [kv, st] : impl_->requests) {
    if (impl_->OwesEngine(st) || HoldsConfirmedHits(st)) out.failed_request_ids.push_back(kv);
  }
  std::sort(out.failed_loads.begin(), out.failed_loads.end(),
            [](const JobResult& a, const JobResult& b) { return a.job_id < b.job_id; });
  std::sort(out.failed_request_ids.begin(), out.failed_request_ids.end());
  impl_->requests.clear();
  impl_->flush_pending.clear();
  impl_->loads.clear();
  impl_->open_frame_round.reset();
  impl_->deadlines.clear();
  impl_->jobs_owing.clear();
  return out;
}

UnservedWork ClientRole::TakeUnservedWork() {
  UnservedWork work;
  if (impl_->closed) return work;
  for (auto& [kv, st] : impl_->requests) {
    if (st.symmetric) {
      impl_->TakeUnansweredProbes(kv, st, &work.probes);
    } else {
      impl_->TakeUnservedLoads(st, &work.loads);
    }
  }
  std::erase_if(impl_->requests, [](const auto& entry) { return entry.second.Idle(); });
  return work;
}

bool ClientRole::HasActiveLoads() const { return !impl_->loads.empty(); }

size_t ClientRole::LoadsInFlight() const { return impl_->jobs_owing.size(); }

size_t ClientRole::TrackedRequests() const { return impl_->requests.size(); }

bool ClientRole::Idle() const { return impl_->requests.empty() && impl_->loads.empty() && impl_->jobs_owing.empty(); }

}  // namespace kvpeer::session
