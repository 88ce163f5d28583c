// ServerRole serving: store supply bound to the rounds that demand it, and
// the data frames that send their blocks.
#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "protocol/limits.h"
#include "session/internal/server_role_impl.h"
#include "session/server_role.h"

namespace kvpeer::session {
namespace {

using protocol::Key;
using protocol::RoundSeq;
using server_detail::RequestState;
using server_detail::RoundKey;
using server_detail::RoundName;

}  // namespace

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

}  // namespace kvpeer::session
