// ClientRole's state, shared by the files that implement it by concept:
// client_role.cc (construction, timers, close and hand-back),
// client_role_lookups.cc (probes and their answers), client_role_loads.cc
// (a load from its fetch to its result) and client_role_frames.cc (inbound
// block_data and its checksums). Internal to those files.
//
// Thread-safety: none; owned by one ClientRole.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/hex.h"
#include "protocol/limits.h"
#include "protocol/messages.h"
#include "session/client_role.h"
#include "session/internal/client_state.h"

namespace kvpeer::session {
namespace client_detail {

// Enough of a key to find it in a log, never the whole 4 KiB.
inline std::string HexPrefix(const Key& key) {
  constexpr size_t kShownBytes = 8;
  std::string out = ToHex(std::string_view(key).substr(0, kShownBytes));
  if (key.size() > kShownBytes) out += "...";
  return out;
}

// Whether a value can travel on the wire at all; the peer would otherwise
// close the whole connection over one engine's bad input.
inline bool WireSafeId(const std::string& id) { return !id.empty() && id.size() <= protocol::kMaxStringChars; }
inline bool WireSafeKey(const Key& key) { return !key.empty() && key.size() <= protocol::kMaxKeyBytes; }

}  // namespace client_detail

struct ClientRole::Impl {
  using Key = protocol::Key;
  using RoundSeq = protocol::RoundSeq;
  using RequestState = client_detail::RequestState;
  using Load = client_detail::Load;

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
  // The request a probe joins (client_role_lookups.cc).
  RequestState& OpenForProbes(const std::string& kv_request_id);

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

}  // namespace kvpeer::session
