#include "session/server_role.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "protocol/limits.h"
#include "session/internal/abort_tombstones.h"
#include "session/internal/frame_budget.h"
#include "session/internal/outbound_round.h"
#include "session/internal/store_ledger.h"

namespace kvpeer::session {
namespace {

using protocol::Key;
using protocol::RoundSeq;
using RoundKey = std::pair<std::string, RoundSeq>;

std::string RoundName(const RoundKey& key) {
  return "kv_request_id " + key.first + " round " + std::to_string(key.second);
}

std::string Seconds(Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

// What a message's keys count against ServerConfig::max_round_key_bytes.
uint64_t ChargeOf(const std::vector<Key>& keys) {
  uint64_t bytes = 0;
  for (const Key& key : keys) bytes += key.size() + kRoundKeyOverhead;
  return bytes;
}

// Everything the role holds for one kv_request_id; pruned when empty.
struct RequestState {
  std::map<RoundSeq, OutboundRound> rounds;
  // Store jobs that no round of this request demanded yet, oldest first. The
  // next disaggregated-prefill fetch adopts those it demands (E30), whatever
  // its round (E59).
  std::vector<JobId> unbound;
  // The producer finished the request. A PD round created later inherits
  // `finishing`, so a fetch that comes after the finish ends once its
  // matched blocks are out (E46) instead of waiting for supply that the
  // finished request will never store.
  bool finishing = false;
};

}  // namespace

struct ServerRole::Impl {
  Impl(std::string peer, ServerConfig cfg, Clock clk, SendFn snd, PublishedBlocks& idx)
      : peer_id(std::move(peer)), config(cfg), clock(std::move(clk)), send(std::move(snd)), index(idx) {}

  std::string peer_id;
  ServerConfig config;
  Clock clock;
  SendFn send;
  PublishedBlocks& index;

  std::map<std::string, RequestState> requests;
  // Rounds with queued blocks in round-robin order: exactly the rounds whose
  // `scheduled` is set, so a pull never meets a stale entry.
  std::deque<RoundKey> ready;
  StoreLedger ledger;
  AbortTombstones acked;
  std::vector<std::string> new_fetch_ids;
  std::set<std::string> new_fetch_set;  // de-duplicates new_fetch_ids
  // Requests the daemon may have bound supply for to this session (reported
  // in new_fetch_ids, or given supply), each with a live `requests` entry;
  // when that entry goes, the id moves to ended_fetch_ids (TakeEndedFetchIds).
  std::set<std::string> bound_ids;
  std::vector<std::string> ended_fetch_ids;
  bool closed = false;
  bool checksums = false;  // the xxh3 feature is on: every data frame carries block_data.xxh3
  std::string close_reason;
  JobFailure close_failure = JobFailure::kSessionClosed;  // what stores refused after close fail with
  size_t open_rounds = 0;                                 // entries of every request's `rounds`
  std::vector<JobId> last_frame_jobs;  // store jobs with a block in the last data frame (OnDataFrameTorn)
  uint64_t rounds_refused = 0;
  uint64_t open_key_bytes = 0;  // sum of every open round's key_bytes
  RoundEvents events;
  // (deadline, round) of every round with a deadline, earliest first.
  std::set<std::pair<TimePoint, RoundKey>> round_deadlines;

  // `charge` more key bytes would pass config.max_round_key_bytes.
  bool OverKeyBytes(uint64_t charge) const {
    return config.max_round_key_bytes != 0 && open_key_bytes + charge > config.max_round_key_bytes;
  }
  void Charge(OutboundRound& round, uint64_t bytes) {
    round.key_bytes += bytes;
    open_key_bytes += bytes;
  }
  void SetDeadline(const RoundKey& key, OutboundRound& round, std::optional<TimePoint> at) {
    if (round.deadline) round_deadlines.erase({*round.deadline, key});
    round.deadline = at;
    if (at) round_deadlines.emplace(*at, key);
  }

  // A new round may not open (config.max_rounds).
  bool AtRoundLimit() const { return config.max_rounds != 0 && open_rounds >= config.max_rounds; }

  OutboundRound* FindRound(const RoundKey& key) {
    auto rit = requests.find(key.first);
    if (rit == requests.end()) return nullptr;
    auto it = rit->second.rounds.find(key.second);
    return it == rit->second.rounds.end() ? nullptr : &it->second;
  }

  void Schedule(const RoundKey& key, OutboundRound& round) {
    if (round.scheduled || round.queue.empty()) return;
    ready.push_back(key);
    round.scheduled = true;
  }

  void Prune(const std::string& kv) {
    auto it = requests.find(kv);
    if (it == requests.end() || !it->second.rounds.empty() || !it->second.unbound.empty()) return;
    requests.erase(it);
    if (bound_ids.erase(kv) > 0) ended_fetch_ids.push_back(kv);
  }

  void NoteNewFetch(const std::string& kv) {
    bound_ids.insert(kv);
    if (new_fetch_set.insert(kv).second) new_fetch_ids.push_back(kv);
  }

  bool Probe(OutboundRound& round, const Key& key);
  void ServeSymmetric(const RoundKey& key, OutboundRound& round, const protocol::Fetch& message);
  void ServePd(RequestState& request, const RoundKey& key, const protocol::Fetch& message);
  void CloseRequest(const std::string& kv);
  bool TryBind(RequestState& request, const std::string& kv, JobId id, StoreLedger::Job& job);
  void OnBlockSent(JobId id);
  void SettleIfIdle(JobId id);
  // `lost` is what the round's store jobs that lose blocks fail with.
  void EndRound(RoundKey key, bool success, const std::string& reason, bool send_done,
                JobFailure lost = JobFailure::kNotServed);
  void EndIfStalled(const RoundKey& key);
  void Expire(JobId id);
  void ExpireRound(const RoundKey& key);
  void SendLookupResp(const protocol::Lookup& message, std::vector<bool> hits);
  size_t MaxBlocksPerFrame() const;
};

// ---- lookups ---------------------------------------------------------------

// Answers one distinct key. Before the round's fetch a hit stays pinned in
// the round, so the block the peer was promised cannot change before it is
// sent. After the fetch the demand is final, so a pin parked now could never
// be used: the hit is only reported.
bool ServerRole::Impl::Probe(OutboundRound& round, const Key& key) {
  if (round.has_demand) return index.PinIfPublished(key) != nullptr;
  auto [slot, fresh] = round.probed.try_emplace(key);
  if (!fresh) return true;
  slot->second = index.PinIfPublished(key);
  if (slot->second) return true;
  round.probed.erase(slot);
  return false;
}

void ServerRole::OnLookup(const protocol::Lookup& message) {
  Impl& s = *impl_;
  if (s.closed || message.keys.empty()) return;
  const RoundKey round_key{message.kv_request_id, message.round_seq};
  const std::vector<bool> all_miss(message.keys.size(), false);
  if (s.AtRoundLimit() && !s.FindRound(round_key)) {
    // Nothing is pinned or remembered: every key answers miss.
    ++s.rounds_refused;
    s.SendLookupResp(message, all_miss);
    return;
  }
  // The keys of a lookup are charged whole (hits or not): an upper bound of
  // what its round keeps, known before anything is pinned.
  const uint64_t charge = ChargeOf(message.keys);
  if (s.OverKeyBytes(charge)) {
    ++s.events.lookups_over_key_bytes;
    s.SendLookupResp(message, all_miss);
    return;
  }
  RequestState& request = s.requests[message.kv_request_id];
  auto [it, created] = request.rounds.try_emplace(message.round_seq);
  OutboundRound& round = it->second;
  // Kept even when every key missed: a fetch of this round then fails at once
  // (E34) instead of waiting like a disaggregated-prefill round would.
  if (created) {
    round.lookup_supplied = true;
    ++s.open_rounds;
    // Retired if no fetch comes (spec section 6): a peer that only probes
    // cannot keep pins forever.
    s.SetDeadline(round_key, round, s.clock() + s.config.round_timeout);
  }
  // After the fetch nothing is parked for a later lookup, so nothing stays charged.
  if (!round.has_demand) s.Charge(round, charge);

  std::vector<bool> hits;
  std::unordered_map<std::string_view, bool> answers;  // each distinct key is probed (and pinned) once
  answers.reserve(message.keys.size());
  hits.reserve(message.keys.size());
  for (const Key& key : message.keys) {
    auto [answer, fresh] = answers.try_emplace(key, false);
    if (fresh) answer->second = s.Probe(round, key);
    hits.push_back(answer->second);
  }
  s.SendLookupResp(message, std::move(hits));
}

// The answer keys and hits in as many lookup_resp frames (all with the
// lookup's round_seq) as the header limit needs: the consumer matches
// answers by (round, key), so parts are as good as one frame. A lookup that
// fit one frame has an answer at most 6 bytes a key longer.
void ServerRole::Impl::SendLookupResp(const protocol::Lookup& message, std::vector<bool> hits) {
  size_t begin = 0;
  while (begin < message.keys.size()) {
    size_t end = begin;
    size_t bytes = 0;
    while (end < message.keys.size() && end - begin < protocol::kMaxListItems) {
      const size_t more = frame_budget::KeyBytes(message.keys[end]) + frame_budget::kHitBytes;
      if (end > begin && bytes + more > frame_budget::kKeysBudget) break;
      bytes += more;
      ++end;
    }
    protocol::LookupResp part{message.kv_request_id,
                              std::vector<Key>(message.keys.begin() + static_cast<std::ptrdiff_t>(begin),
                                               message.keys.begin() + static_cast<std::ptrdiff_t>(end)),
                              std::vector<bool>(hits.begin() + static_cast<std::ptrdiff_t>(begin),
                                                hits.begin() + static_cast<std::ptrdiff_t>(end)),
                              message.round_seq};
    send(OutFrame{std::move(part), {}});
    begin = end;
  }
}

// ---- fetches ---------------------------------------------------------------

Status ServerRole::OnFetch(const protocol::Fetch& message) {
  Impl& s = *impl_;
  if (s.closed) return Status::Ok();
  if (message.keys.empty()) {
    s.CloseRequest(message.kv_request_id);
    return Status::Ok();
  }
  const RoundKey key{message.kv_request_id, message.round_seq};
  // A fetch after its round's abort_ack would earn a second terminal. A
  // correct consumer cannot send one (its abort follows its fetch), so it is
  // dropped rather than served.
  if (s.acked.Contains(key)) return Status::Ok();
  OutboundRound* existing = s.FindRound(key);
  if (existing && existing->has_demand) {
    return Status::Violation("duplicate fetch for " + RoundName(key));
  }
  if (!existing && s.AtRoundLimit()) {
    // The round's one terminal: the consumer's load fails at once.
    ++s.rounds_refused;
    s.send(OutFrame{protocol::TransferDone{message.kv_request_id, false, message.round_seq}, {}});
    return Status::Ok();
  }
  // Only a disaggregated round keeps its fetch's keys (as unmatched demand);
  // a symmetric fetch turns the round's pins into queued blocks.
  if (!existing && s.OverKeyBytes(ChargeOf(message.keys))) {
    ++s.events.fetches_over_key_bytes;
    s.send(OutFrame{protocol::TransferDone{message.kv_request_id, false, message.round_seq}, {}});
    return Status::Ok();
  }
  RequestState& request = s.requests[message.kv_request_id];
  s.NoteNewFetch(message.kv_request_id);
  // A round without demand exists only because lookups created it.
  if (existing) {
    s.ServeSymmetric(key, *existing, message);
  } else {
    s.ServePd(request, key, message);
  }
  return Status::Ok();
}

void ServerRole::Impl::ServeSymmetric(const RoundKey& key, OutboundRound& round, const protocol::Fetch& message) {
  SetDeadline(key, round, std::nullopt);  // the fetch came: the round ends by its transfer
  if (!round.AddSymmetricDemand(message.keys, message.block_indexes)) {
    // A key the lookup did not pin can never be supplied: fail now rather
    // than make the consumer wait for its load timeout (E34).
    EndRound(key, false, {}, /*send_done=*/true);
    return;
  }
  Schedule(key, round);
}

void ServerRole::Impl::ServePd(RequestState& request, const RoundKey& key, const protocol::Fetch& message) {
  OutboundRound& round = request.rounds[key.second];
  ++open_rounds;
  Charge(round, ChargeOf(message.keys));
  // Demand still unmet then fails the round (spec section 6): supply that a
  // producer never stores cannot hold the round, its keys and its
  // consumer's slots forever.
  SetDeadline(key, round, clock() + config.unsupplied_timeout);
  round.AddPdDemand(message.keys, message.block_indexes);
  round.finishing = request.finishing;
  std::erase_if(request.unbound, [&](JobId id) {
    StoreLedger::Job* job = ledger.Find(id);  // `unbound` lists open jobs only
    return job && TryBind(request, key.first, id, *job);
  });
  EndIfStalled(key);
}

// The terminal empty fetch: the consumer is done with this request. Rounds
// with demand are left alone: each has its own terminal still to come, and a
// round still sending keeps its pins until its blocks are out (E60). Only
// what waits for a fetch that will now never come is released.
void ServerRole::Impl::CloseRequest(const std::string& kv) {
  acked.EraseRequest(kv);
  auto rit = requests.find(kv);
  if (rit == requests.end()) return;
  std::vector<JobId> unbound = std::move(rit->second.unbound);
  rit->second.unbound.clear();
  std::vector<RoundSeq> idle;
  for (const auto& [seq, round] : rit->second.rounds) {
    if (!round.has_demand) idle.push_back(seq);
  }
  for (JobId id : unbound) {
    ledger.Fail(id, JobFailure::kUnfetched, "peer ended kv_request_id " + kv + " without fetching these blocks");
  }
  for (RoundSeq seq : idle) EndRound({kv, seq}, false, {}, /*send_done=*/false, JobFailure::kUnfetched);
  Prune(kv);
}

// ---- supply ----------------------------------------------------------------

void ServerRole::AddSupply(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                           std::vector<PinRef> blocks) {
  Impl& s = *impl_;
  const auto reject = [&](std::string why, JobFailure cause = JobFailure::kRefused) {
    s.ledger.Record(JobResult{job_id, kv_request_id, false, std::move(why), cause});
  };
  if (s.closed) return reject(s.close_reason, s.close_failure);
  if (keys.size() != blocks.size())
    return reject("store has " + std::to_string(keys.size()) + " keys but " + std::to_string(blocks.size()) +
                  " blocks");
  if (std::any_of(blocks.begin(), blocks.end(), [](const PinRef& pin) { return !pin; })) {
    return reject("store has a block that is not pinned");
  }
  if (s.ledger.IsOpen(job_id)) return reject("store job id " + std::to_string(job_id) + " is already in use");
  if (keys.empty()) {
    s.ledger.Record(JobResult{job_id, kv_request_id, true, {}});  // nothing to deliver
    return;
  }
  StoreLedger::Job& job = s.ledger.Open(job_id, kv_request_id, s.clock() + s.config.store_timeout);
  std::set<Key> seen;  // a key stored twice in one job is one block to offer
  for (size_t i = 0; i < keys.size(); ++i) {
    if (seen.insert(keys[i]).second) job.parked.emplace_back(std::move(keys[i]), std::move(blocks[i]));
  }
  RequestState& request = s.requests[kv_request_id];
  // The daemon routed this supply here: its binding ends with the request.
  s.bound_ids.insert(kv_request_id);
  // Supply that no open round waits for stays unbound for the next fetch,
  // whatever its round (E59).
  if (!s.TryBind(request, kv_request_id, job_id, job)) request.unbound.push_back(job_id);
}

// Offers each block of the job to the oldest open disaggregated-prefill
// round still waiting for its key, so one job can serve several rounds.
// If any round took a block the job is bound: the blocks nobody waits for
// are dropped (the open rounds' demand is final, and the job is not held
// back for fetches that may never come), and it stops timing out (its
// blocks now leave with their rounds, which end by their own terminals).
// Otherwise nothing changes and the job keeps waiting.
bool ServerRole::Impl::TryBind(RequestState& request, const std::string& kv, JobId id, StoreLedger::Job& job) {
  for (const auto& [block_key, pin] : job.parked) {
    for (auto& [seq, round] : request.rounds) {
      if (round.lookup_supplied || !round.has_demand) continue;
      const size_t queued = round.Offer(block_key, pin, id);
      if (queued == 0) continue;
      job.queued += queued;
      // Supplied in full: the round now only sends, which no timer cuts short.
      if (round.unmatched.empty()) SetDeadline({kv, seq}, round, std::nullopt);
      Schedule({kv, seq}, round);
      break;
    }
  }
  if (job.queued == 0) return false;
  job.bound = true;
  job.parked.clear();
  ledger.StopTimer(id);
  return true;
}

void ServerRole::Impl::OnBlockSent(JobId id) {
  StoreLedger::Job* job = ledger.Find(id);
  if (!job) return;
  --job->queued;
  ++job->sent;
  SettleIfIdle(id);
}

// A bound job with nothing left in any queue can change no more, and no
// round reads its slots any more: it succeeds if every block taken from it
// was sent. Settling only now (not when a round first loses its blocks)
// keeps its other rounds' blocks valid until they are out.
void ServerRole::Impl::SettleIfIdle(JobId id) {
  StoreLedger::Job* job = ledger.Find(id);
  if (!job || !job->bound || job->queued > 0) return;
  if (!job->lost) {
    ledger.Succeed(id);
  } else {
    ledger.Fail(id, job->lost->cause, job->lost->reason);
  }
}

// ---- ending rounds ---------------------------------------------------------

// The only place a round ends. It is removed from the map before anything
// else happens and every caller finds it by key, so a second trigger for
// the same round finds nothing: a round ends exactly once (E57).
void ServerRole::Impl::EndRound(RoundKey key, bool success, const std::string& reason, bool send_done,
                                JobFailure lost) {
  auto rit = requests.find(key.first);
  if (rit == requests.end()) return;
  auto it = rit->second.rounds.find(key.second);
  if (it == rit->second.rounds.end()) return;
  OutboundRound round = std::move(it->second);
  rit->second.rounds.erase(it);
  --open_rounds;
  open_key_bytes -= round.key_bytes;
  if (round.deadline) round_deadlines.erase({*round.deadline, key});
  if (round.scheduled) std::erase(ready, key);
  const std::string why = reason.empty() ? RoundName(key) + " failed" : reason;
  std::set<JobId> touched;
  for (const QueuedBlock& block : round.queue) {
    StoreLedger::Job* job = block.job ? ledger.Find(*block.job) : nullptr;
    if (!job) continue;
    --job->queued;
    if (!job->lost) job->lost = FailureReport{lost, why};
    touched.insert(*block.job);
  }
  round.queue.clear();  // no settled job's slot may be read after this
  for (JobId id : touched) SettleIfIdle(id);
  if (send_done && round.has_demand) send(OutFrame{protocol::TransferDone{key.first, success, key.second}, {}});
  Prune(key.first);
  // `round` dies here with its remaining pins; frames already produced hold
  // their own references until they are written.
}

// A finishing round with nothing queued will get no more supply: it ends
// now, successful only if every demanded block went out (E44-E46).
void ServerRole::Impl::EndIfStalled(const RoundKey& key) {
  OutboundRound* round = FindRound(key);
  if (!round || !round->finishing || !round->queue.empty()) return;
  EndRound(key, round->Complete(), RoundName(key) + " ended: the producer finished with demand unmet", true);
}

void ServerRole::Finish(const std::string& kv_request_id) {
  Impl& s = *impl_;
  auto rit = s.requests.find(kv_request_id);
  if (s.closed || rit == s.requests.end()) return;
  rit->second.finishing = true;
  std::vector<RoundSeq> serving;
  // Rounds without demand are left for their fetch (prefiller first).
  for (auto& [seq, round] : rit->second.rounds) {
    if (!round.has_demand) continue;
    round.finishing = true;
    serving.push_back(seq);
  }
  for (RoundSeq seq : serving) s.EndIfStalled({kv_request_id, seq});
}

void ServerRole::OnAbortFetch(const protocol::AbortFetch& message) {
  Impl& s = *impl_;
  const RoundKey key{message.kv_request_id, message.round_seq};
  if (s.closed || s.acked.Contains(key)) return;  // one ack per round (E42)
  // abort_ack is the round's terminal, so no transfer_done. A frame already
  // produced is ahead of the ack on the wire and the consumer discards it.
  s.EndRound(key, false, RoundName(key) + " aborted by the peer", /*send_done=*/false, JobFailure::kAborted);
  s.send(OutFrame{protocol::AbortAck{message.kv_request_id, message.round_seq}, {}});
  s.acked.Insert(key);
}

// ---- data frames -----------------------------------------------------------

size_t ServerRole::Impl::MaxBlocksPerFrame() const {
  const uint64_t block_len = std::max<uint64_t>(config.block_len, 1);
  const uint64_t payload = std::min(config.max_frame_payload, protocol::kMaxPayloadLen);
  const uint64_t blocks = std::min<uint64_t>(payload / block_len, protocol::kMaxListItems);
  return static_cast<size_t>(std::max<uint64_t>(blocks, 1));
}

void ServerRole::EnableChecksums() { impl_->checksums = true; }

bool ServerRole::ProduceDataFrame() {
  Impl& s = *impl_;
  if (s.closed) return false;
  // REQUIRES of this call: the previous data frame has been written, so the
  // results decided since then no longer guard unwritten bytes.
  s.ledger.OnFrameWritten();
  if (s.ready.empty()) return false;
  const RoundKey key = std::move(s.ready.front());
  s.ready.pop_front();
  OutboundRound& round = *s.FindRound(key);  // `ready` lists live rounds only
  round.scheduled = false;
  // Hashed before the header is written (wire-protocol.md section 7), which
  // also leaves the bytes warm in cache for the kernel's copy.
  std::optional<std::vector<uint64_t>> checksums;
  if (s.checksums) checksums = round.NextBatchChecksums(s.MaxBlocksPerFrame());
  const bool readable = s.checksums ? checksums.has_value() : round.NextBatchReadable(s.MaxBlocksPerFrame());
  if (!readable) {
    // An engine truncated its region under a pinned block: the round fails
    // (transfer_done false) instead of the connection, which a fault in the
    // middle of writing a frame would break.
    s.EndRound(key, false, RoundName(key) + " failed: a source block is no longer mapped (region truncated)",
               /*send_done=*/true);
    return true;
  }

  std::vector<QueuedBlock> batch = round.TakeBatch(s.MaxBlocksPerFrame());
  s.last_frame_jobs.clear();
  for (const QueuedBlock& block : batch) {
    if (block.job) s.last_frame_jobs.push_back(*block.job);
  }
  protocol::BlockData data{key.first, key.second, {}};
  OutFrame frame;
  for (const QueuedBlock& block : batch) {
    data.block_indexes.push_back(block.dest);
    frame.blocks.push_back(block.pin);
  }
  if (checksums) data.xxh3 = protocol::BlockChecksums::Of(std::move(*checksums));
  frame.message = std::move(data);
  s.send(std::move(frame));
  s.ledger.OnFrameProduced();
  for (const QueuedBlock& block : batch) {
    if (block.job) s.OnBlockSent(*block.job);
  }
  if (!round.queue.empty()) {
    s.Schedule(key, round);  // to the back: rounds take turns
  } else if (round.Complete()) {
    // transfer_done goes right behind the round's last block_data: the
    // SendFn writes frames in the order they are sent (session_types.h), so
    // the data precedes it on the wire.
    s.EndRound(key, true, {}, /*send_done=*/true);
  } else {
    s.EndIfStalled(key);
  }
  return true;
}

void ServerRole::OnDataFrameTorn(const std::string& kv_request_id, protocol::RoundSeq round_seq,
                                 const std::string& reason) {
  Impl& s = *impl_;
  if (s.closed) return;
  for (JobId id : s.last_frame_jobs) {
    if (StoreLedger::Job* job = s.ledger.Find(id)) {
      // It fails once its other blocks are out.
      if (!job->lost) job->lost = FailureReport{JobFailure::kNotServed, reason};
    } else {
      s.ledger.FailHeld(id, JobFailure::kNotServed, reason);  // succeeded with this frame: the result is still held
    }
  }
  s.last_frame_jobs.clear();
  s.EndRound({kv_request_id, round_seq}, false, reason, /*send_done=*/true);
}

bool ServerRole::HasDataToSend() const {
  const Impl& s = *impl_;
  // Held results need one more pull (after the write) to be released.
  return !s.closed && (!s.ready.empty() || s.ledger.HasHeldResults());
}

// ---- timers, results, close ------------------------------------------------

// Only unbound jobs time out (TryBind stops the timer of a bound one).
void ServerRole::Impl::Expire(JobId id) {
  StoreLedger::Job* job = ledger.Find(id);
  if (!job) return;
  const std::string kv = job->kv_request_id;
  ledger.Fail(id, JobFailure::kTimeout,
              "store job " + std::to_string(id) + " for kv_request_id " + kv + ": not fetched within " +
                  Seconds(config.store_timeout));
  std::erase(requests[kv].unbound, id);
  Prune(kv);
}

// A round whose deadline passed: a lookup-only round is retired (its pins
// dropped, no frame: the consumer never fetched); a disaggregated round
// still waiting for supply gets its terminal, transfer_done{success:false}.
// A round whose demand is all matched is only sending and keeps going.
void ServerRole::Impl::ExpireRound(const RoundKey& key) {
  OutboundRound* round = FindRound(key);
  if (!round) return;
  round->deadline.reset();  // the caller took it off the list
  if (!round->has_demand) {
    ++events.lookup_rounds_expired;
    EndRound(key, false, RoundName(key) + ": no fetch within " + Seconds(config.round_timeout), false);
  } else if (!round->unmatched.empty()) {
    ++events.fetches_unsupplied;
    EndRound(key, false, RoundName(key) + ": demand not supplied within " + Seconds(config.unsupplied_timeout),
             /*send_done=*/true);
  }
}

void ServerRole::OnTick() {
  Impl& s = *impl_;
  if (s.closed) return;
  const TimePoint now = s.clock();
  for (JobId id : s.ledger.Expired(now)) s.Expire(id);
  while (!s.closed && !s.round_deadlines.empty() && s.round_deadlines.begin()->first <= now) {
    const RoundKey key = s.round_deadlines.begin()->second;
    s.round_deadlines.erase(s.round_deadlines.begin());
    s.ExpireRound(key);
  }
}

std::optional<TimePoint> ServerRole::NextDeadline() const {
  std::optional<TimePoint> next = impl_->ledger.NextDeadline();
  if (!impl_->round_deadlines.empty()) {
    const TimePoint round = impl_->round_deadlines.begin()->first;
    if (!next || round < *next) next = round;
  }
  return next;
}

std::vector<JobResult> ServerRole::TakeStoreResults() { return impl_->ledger.TakeResults(); }

std::vector<std::string> ServerRole::TakeNewFetchIds() {
  Impl& s = *impl_;
  std::vector<std::string> ids = std::move(s.new_fetch_ids);
  s.new_fetch_ids.clear();
  s.new_fetch_set.clear();
  return ids;
}

std::vector<std::string> ServerRole::TakeEndedFetchIds() { return std::exchange(impl_->ended_fetch_ids, {}); }

// Only state a fetch or supply opened counts: a request that only a later
// lookup brought back needs no binding (its fetch, if any, binds anew), and
// Prune reports only tracked requests, so an untracked one never would be.
bool ServerRole::Serves(const std::string& kv_request_id) const { return impl_->bound_ids.contains(kv_request_id); }

// Results decided before the close (even those held for an unwritten frame)
// are returned too, so no job is left without one (E58). The caller stops
// the writer before handing them to engines.
std::vector<JobResult> ServerRole::Close(const std::string& reason, JobFailure failure) {
  Impl& s = *impl_;
  if (s.closed) return s.ledger.TakeResults();
  s.closed = true;
  s.close_reason = reason;
  s.close_failure = failure;
  s.requests.clear();   // drops every round's pins
  s.bound_ids.clear();  // the daemon drops a closed session's bindings itself
  s.ended_fetch_ids.clear();
  s.open_rounds = 0;
  s.open_key_bytes = 0;
  s.round_deadlines.clear();
  s.ready.clear();
  return s.ledger.CloseAll(failure, reason);
}

size_t ServerRole::RoundsServing() const {
  size_t serving = 0;
  for (const auto& [kv, request] : impl_->requests) {
    for (const auto& [seq, round] : request.rounds) serving += round.has_demand ? 1 : 0;
  }
  return serving;
}

size_t ServerRole::RoundsOpen() const { return impl_->open_rounds; }

uint64_t ServerRole::RoundsRefused() const { return impl_->rounds_refused; }

uint64_t ServerRole::RoundKeyBytes() const { return impl_->open_key_bytes; }

RoundEvents ServerRole::TakeRoundEvents() { return std::exchange(impl_->events, RoundEvents{}); }

size_t ServerRole::TrackedRequests() const { return impl_->requests.size(); }

bool ServerRole::Idle() const {
  const Impl& s = *impl_;
  return s.requests.empty() && s.ledger.open_jobs() == 0 && s.ready.empty() && !s.ledger.HasHeldResults();
}

ServerRole::ServerRole(std::string peer_id, ServerConfig config, Clock clock, SendFn send, PublishedBlocks& index)
    : impl_(std::make_unique<Impl>(std::move(peer_id), config, std::move(clock), std::move(send), index)) {}

ServerRole::~ServerRole() = default;

}  // namespace kvpeer::session
