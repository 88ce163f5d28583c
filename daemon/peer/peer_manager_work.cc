// PeerManager's engine work (peer_manager.h): lookups, loads, stores and
// finishes routed to the peer's session, store supply bound to the session
// that fetched it, and the handed-back work asked again. What to do is the
// PeerDirectory's to say; this file only carries it out.
#include <spdlog/spdlog.h>

#include "daemon/peer/peer_manager.h"

namespace kvpeer::daemon {

// ---------------------------------------------------------------------------
// Engine work

Status PeerManager::Lookup(const std::string& peer, const std::string& kv_request_id,
                           const std::vector<protocol::Key>& keys, bool flush,
                           std::vector<session::ProbeAnswer>* answers) {
  answers->clear();
  StatusOr<PeerConnection*> found = SessionFor(peer);
  if (!found.ok()) {
    if (found.status().code() != Status::Code::kUnavailable) return found.status();
    // Wire spec section 1: while the peer backs off, probes answer miss at once.
    answers->assign(keys.size(), session::ProbeAnswer::kMiss);
    return Status::Ok();
  }
  PeerConnection* connection = *found;
  if (config_.max_pending_lookups != 0) {
    const size_t probes = connection->session().ProbesWith(kv_request_id, keys);
    if (probes > config_.max_pending_lookups) {
      const std::string why = "max-pending-lookups (" + std::to_string(config_.max_pending_lookups) +
                              ") reached: kv_request_id '" + kv_request_id + "' would hold " + std::to_string(probes) +
                              " distinct probes on peer " + peer +
                              "; load or finish the request first, or raise --max-pending-lookups";
      limits_.Hit(counters_, Counter::kLimitMaxPendingLookups, why);
      return Status::Invalid(why);
    }
  }
  connection->WithSession([&](session::PeerSession& session) {
    session.RegisterLookups(kv_request_id, keys, answers);  // the request found once, not once a key
    if (flush) session.FlushPendingLookups();
  });
  return Status::Ok();
}

size_t PeerManager::FlushLookups() {
  size_t sent = 0;
  for (const auto& [peer, entry] : directory_.entries()) {
    PeerConnection* connection = Current(peer);
    if (connection == nullptr || connection->session_over()) continue;
    sent += connection->WithSession([](session::PeerSession& session) { return session.FlushPendingLookups(); });
  }
  return sent;
}

Status PeerManager::Load(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                         std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> slots,
                         session::SlotSinkRef sink) {
  return SubmitLoad(job_id, peer, kv_request_id, std::move(keys), std::move(slots), std::move(sink),
                    /*resubmitted=*/std::nullopt);
}

Status PeerManager::SubmitLoad(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                               std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> slots,
                               session::SlotSinkRef sink, std::optional<session::Duration> resubmitted) {
  StatusOr<PeerConnection*> found = SessionFor(peer);
  if (!found.ok()) {
    if (found.status().code() == Status::Code::kUnavailable) {
      if (PeerCounters* counters = directory_.Counters(peer)) ++counters->loads_rejected;
    }
    return found.status();
  }
  PeerConnection* connection = *found;
  const uint64_t load_bytes = keys.size() * model_.settings().block_len;
  // The start is noted before the after-step, which may already decide the load's result.
  Status status = connection->WithSession([&](session::PeerSession& session) {
    // Asked again: only what is left of the first submission's load timeout.
    Status requested =
        session.RequestBlocks(job_id, kv_request_id, std::move(keys), std::move(slots), sink, resubmitted);
    if (requested.ok()) {
      metrics_.RecordLoadStart(job_id, load_bytes);
      if (!resubmitted) directory_.OnLoadStarted(job_id);
    }
    return requested;
  });
  // Any failure but the caller's own request means the peer cannot serve it.
  if (!status.ok() && status.code() != Status::Code::kInvalid) return Status::Unavailable(status.message());
  return status;
}

void PeerManager::Store(session::JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                        std::vector<session::PinRef> blocks) {
  if (std::optional<std::string> peer = directory_.BoundPeer(kv_request_id)) {
    PeerConnection* connection = Current(*peer);
    if (connection != nullptr && !connection->session_over()) {
      connection->WithSession([&](session::PeerSession& session) {
        session.AddSupply(job_id, kv_request_id, std::move(keys), std::move(blocks));
      });
      return;
    }
  }
  unbound_supply_.Add(job_id, kv_request_id, std::move(keys), std::move(blocks), std::chrono::steady_clock::now());
  SweepUnboundSupply();
}

void PeerManager::BindSupply(session::PeerSession& session, const std::string& kv_request_id) {
  directory_.Bind(kv_request_id, session.peer_id());
  for (auto& job : unbound_supply_.Take(kv_request_id)) {
    session.AddSupply(job.job_id, kv_request_id, std::move(job.keys), std::move(job.blocks));
  }
}

// PeerDirectory::UnbindEnded says when a binding goes.
void PeerManager::UnbindEndedSupply(PeerConnection& connection, const std::string& kv_request_id) {
  const std::string& peer = connection.session().peer_id();
  const PeerConnection* current = Current(peer);
  directory_.UnbindEnded(kv_request_id, peer, current != nullptr && current->session().ServesRequest(kv_request_id));
}

void PeerManager::SweepUnboundSupply() {
  for (const auto& failed : unbound_supply_.OnTick(std::chrono::steady_clock::now())) results_.OnStoreResult(failed);
  auto next = unbound_supply_.NextDeadline();
  if (!next) return;
  supply_timer_.expires_at(*next);
  supply_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) SweepUnboundSupply();
  });
}

void PeerManager::Finish(const std::string& kv_request_id, const std::vector<std::string>& client_peers,
                         bool producer) {
  for (const std::string& peer : client_peers) {
    FinishResubmissions(peer, kv_request_id);
    PeerConnection* connection = Current(peer);
    if (connection == nullptr || connection->session_over()) continue;
    connection->WithSession([&](session::PeerSession& session) { session.FinishClient(kv_request_id); });
  }
  if (!producer) return;
  // Unbound supply stays: a prefiller finishes its request before the
  // decoder fetches, and the supply must still meet that fetch.
  directory_.Unbind(kv_request_id);
  for (const auto& [peer, entry] : directory_.entries()) {
    PeerConnection* connection = Current(peer);
    if (connection == nullptr || connection->session_over()) continue;
    connection->WithSession([&](session::PeerSession& session) { session.FinishServer(kv_request_id); });
  }
}

size_t PeerManager::LoadsInFlight() const {
  size_t total = 0;
  for (const auto& [id, connection] : connections_) {
    if (!connection->session_over()) total += connection->session().LoadsInFlight();
  }
  return total;
}

// ---------------------------------------------------------------------------
// Work handed back by a superseded session (docs/wire-protocol.md, section 9,
// "(f) Work on a superseded connection")

void PeerManager::ResubmitQueued() {
  for (Resubmission& queued : directory_.TakeResubmissions()) {
    spdlog::info(
        "peer {}: asking again for {} loads and the probes of {} requests that a superseded connection "
        "handed back ({})",
        queued.peer, queued.work.loads.size(), queued.work.probes.size(), queued.reason);
    for (session::UnservedLoad& load : queued.work.loads) ResubmitLoad(queued.peer, std::move(load), queued.reason);
    // Probes go to the replacement this node chose (PeerDirectory::HandBack),
    // never to a new dial: a peer that keeps closing its connections as idle
    // or duplicate then makes no dial the engines did not ask for.
    for (const session::UnservedProbes& probes : queued.work.probes) {
      std::vector<session::ProbeAnswer> answers;
      if (!Lookup(queued.peer, probes.kv_request_id, probes.keys, /*flush=*/true, &answers).ok()) {
        results_.OnRequestFailed(queued.peer, probes.kv_request_id);
      }
    }
    if (!queued.work.probes.empty()) results_.OnProbesChanged(queued.peer, false);
  }
}

void PeerManager::FinishResubmissions(const std::string& peer, const std::string& kv_request_id) {
  for (session::JobId job_id : directory_.FinishRequest(peer, kv_request_id)) {
    ReportLoadResult(peer, session::JobResult{job_id, kv_request_id, false, "request finished",
                                              session::JobFailure::kRequestFinished});
  }
}

// The directory keeps the bound (PeerDirectory::AllowResubmit).
void PeerManager::ResubmitLoad(const std::string& peer, session::UnservedLoad load, const std::string& reason) {
  const session::JobId job_id = load.job_id;
  const std::string kv_request_id = load.kv_request_id;
  const ResubmitVerdict verdict = directory_.AllowResubmit(job_id);
  Status status = Status::Unavailable(reason + "; asked again " + std::to_string(verdict.times_asked) + " times");
  if (verdict.allowed) {
    status = SubmitLoad(job_id, peer, kv_request_id, std::move(load.keys), std::move(load.block_indexes),
                        std::move(load.sink), verdict.time_left);
    if (status.ok()) return;
  } else if (verdict.times_asked < kMaxResubmits) {
    status = Status::Unavailable(
        reason + "; not asked again: the load timeout (" +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(config_.load_timeout).count()) +
        " s) since the load's start has passed");
  }
  const auto failure = shutting_down_ ? session::JobFailure::kShutdown : session::JobFailure::kSessionClosed;
  ReportLoadResult(peer, session::JobResult{job_id, kv_request_id, false, status.message(), failure});
}

}  // namespace kvpeer::daemon
