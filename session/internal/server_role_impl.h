// ServerRole's state, shared by the files that implement it by concept:
// server_role_admission.cc (lookups and fetches: which rounds open, within
// the round and key-byte limits), server_role_serving.cc (store supply bound
// to rounds, and the data frames that send it) and server_role.cc (round
// ends, timers, results and close). Internal to those files.
//
// Thread-safety: none; owned by one ServerRole.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "protocol/messages.h"
#include "session/internal/abort_tombstones.h"
#include "session/internal/outbound_round.h"
#include "session/internal/store_ledger.h"
#include "session/server_role.h"

namespace kvpeer::session {
namespace server_detail {

using RoundKey = std::pair<std::string, protocol::RoundSeq>;

inline std::string RoundName(const RoundKey& key) {
  return "kv_request_id " + key.first + " round " + std::to_string(key.second);
}

// Everything the role holds for one kv_request_id; pruned when empty.
struct RequestState {
  std::map<protocol::RoundSeq, OutboundRound> rounds;
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

}  // namespace server_detail

struct ServerRole::Impl {
  using Key = protocol::Key;
  using RoundSeq = protocol::RoundSeq;
  using RoundKey = server_detail::RoundKey;
  using RequestState = server_detail::RequestState;

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

}  // namespace kvpeer::session
