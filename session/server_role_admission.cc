// ServerRole admission: lookups and fetches, which open, serve or refuse a
// round (ServerConfig::max_rounds, max_round_key_bytes).
#include <utility>

#include "protocol/limits.h"
#include "session/internal/frame_budget.h"
#include "session/internal/server_role_impl.h"
#include "session/server_role.h"

namespace kvpeer::session {
namespace {

using protocol::Key;
using protocol::RoundSeq;
using server_detail::RequestState;
using server_detail::RoundKey;
using server_detail::RoundName;

// What a message's keys count against ServerConfig::max_round_key_bytes.
uint64_t ChargeOf(const std::vector<Key>& keys) {
  uint64_t bytes = 0;
  for (const Key& key : keys) bytes += key.size() + kRoundKeyOverhead;
  return bytes;
}

}  // namespace

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

  // A key repeated in the lookup is pinned once all the same: Probe finds a
  // hit already in the round's pins (a miss is asked again, and misses
  // again, since nothing can publish it in between). No map of answers per
  // lookup: that was a hash and an insert per key.
  std::vector<bool> hits;
  hits.reserve(message.keys.size());
  for (const Key& key : message.keys) hits.push_back(s.Probe(round, key));
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

}  // namespace kvpeer::session
