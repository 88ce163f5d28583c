#include "session/server_role.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "session/internal/server_role_impl.h"

namespace kvpeer::session {
namespace {

using protocol::RoundSeq;
using server_detail::RoundKey;
using server_detail::RoundName;

std::string Seconds(Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

}  // namespace

ServerRole::ServerRole(std::string peer_id, ServerConfig config, Clock clock, SendFn send, PublishedBlocks& index)
    : impl_(std::make_unique<Impl>(std::move(peer_id), config, std::move(clock), std::move(send), index)) {}

ServerRole::~ServerRole() = default;

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

}  // namespace kvpeer::session
