#include "session/client_role.h"

#include <algorithm>
#include <utility>

#include "session/internal/client_role_impl.h"

namespace kvpeer::session {
namespace {

using client_detail::Load;
using client_detail::Phase;
using client_detail::Probe;
using client_detail::RequestState;
using protocol::RoundSeq;

// Hits the producer pinned for the open round die with the session (it
// unpins on close), and a new session would take a load of them for a
// disaggregated-prefill load that waits out the load timeout. The reference
// reports only loads and unresolved probes (E61); we report these too, so
// the engine learns at once that it must recompute.
bool HoldsConfirmedHits(const RequestState& st) {
  if (!st.open_round) return false;
  return std::any_of(st.probes.begin(), st.probes.end(), [](const auto& probe) { return probe.second == Probe::kHit; });
}

}  // namespace

ClientRole::ClientRole(std::string peer_id, ClientConfig config, Clock clock, SendFn send)
    : impl_(std::make_unique<Impl>(std::move(peer_id), config, std::move(clock), std::move(send))) {}

ClientRole::~ClientRole() = default;

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
