#include "daemon/peer/peer_directory.h"

#include <algorithm>

namespace kvpeer::daemon {

namespace {

// The reaper looks at most this long after an entry became reapable.
constexpr auto kMaxReapTick = std::chrono::seconds(1);

}  // namespace

PeerDirectory::PeerDirectory(PeerDirectoryConfig config, session::Clock clock, WallClock wall_clock)
    : config_(std::move(config)), clock_(std::move(clock)), wall_clock_(std::move(wall_clock)) {}

void PeerDirectory::SetState(PeerEntry& entry, PeerState state) {
  if (entry.state == state) return;
  entry.state = state;
  entry.since = wall_clock_();
}

PeerRoute PeerDirectory::Acquire(const std::string& peer) {
  const bool known = entries_.contains(peer);
  PeerEntry& entry = entries_[peer];
  if (!known) {
    entry.since = wall_clock_();
    entry.idle_since = clock_();
  }
  if (entry.connection != 0) return PeerRoute{PeerRoute::Kind::kUse, entry.connection, {}};
  if (entry.state == PeerState::kBackoff && clock_() < entry.backoff_until) {
    return PeerRoute{PeerRoute::Kind::kBackoff, 0,
                     "peer " + peer + " is unreachable (" + entry.last_error.value_or("unknown error") +
                         "); retrying after backoff"};
  }
  if (AtPeerLimit()) {
    std::string why = "max-peers (" + std::to_string(config_.max_peers) + ") reached: not dialling peer " + peer +
                      " while " + std::to_string(LivePeerCount()) + " peer sessions are open";
    if (!known) entries_.erase(peer);  // a peer never dialled is not listed
    return PeerRoute{PeerRoute::Kind::kAtPeerLimit, 0, std::move(why)};
  }
  entry.connection = next_connection_++;
  SetState(entry, PeerState::kConnecting);
  ++entry.counters.dials;
  return PeerRoute{PeerRoute::Kind::kDial, entry.connection, {}};
}

// Nothing before authentication (wire spec section 4, item 6): an accepted
// connection reaches here only once ready, so what unauthenticated hosts
// do creates no entry and closes nothing.
Adoption PeerDirectory::Adopt(const std::string& peer, const std::optional<session::ConnectionFacts>& existing,
                              const session::ConnectionFacts& incoming) {
  auto known = entries_.find(peer);
  const bool live = known != entries_.end() && known->second.connection != 0;
  if (!live && AtPeerLimit()) return Adoption{Adoption::Kind::kTooManyPeers};
  PeerEntry& entry = entries_[peer];
  if (known == entries_.end()) {
    entry.since = wall_clock_();
    entry.idle_since = clock_();
  }
  Adoption adoption{Adoption::Kind::kAdopt, next_connection_++};
  if (live && existing) {
    switch (session::ArbitrateConnections(config_.local_id, peer, *existing, incoming)) {
      case session::Arbitration::kCloseNewDuplicate:
        return Adoption{Adoption::Kind::kCloseNew};
      case session::Arbitration::kCloseOldDuplicate:
        adoption.kind = Adoption::Kind::kSupersede;
        break;
      case session::Arbitration::kReplaceOld:
        adoption.kind = Adoption::Kind::kSupersede;
        adoption.cause = session::CloseCause::kPeerRestarted;
        adoption.reason = session::PeerDisconnectReason::kPeerRestarted;
        break;
      case session::Arbitration::kKeepBoth:
        break;
    }
  }
  if (adoption.kind == Adoption::Kind::kSupersede) {
    // The replacement is the peer's connection before the old one closes:
    // what the old one hands back then finds the replacement, and the entry
    // never passes through closed. Its bindings went with it.
    adoption.old = entry.connection;
    DropBindings(peer);
  }
  // The state becomes ready (and waiters are answered) in OnReady.
  entry.connection = adoption.connection;
  return adoption;
}

std::optional<std::vector<ConnectWaiter>> PeerDirectory::OnReady(const std::string& peer, ConnectionId connection) {
  auto it = entries_.find(peer);
  if (it == entries_.end() || connection == 0 || it->second.connection != connection) return std::nullopt;
  PeerEntry& entry = it->second;
  if (entry.state == PeerState::kReady) return std::nullopt;
  SetState(entry, PeerState::kReady);
  entry.backoff = session::Duration(0);
  entry.last_error.reset();
  ++entry.counters.sessions_ready;
  return std::exchange(entry.connect_waiters, {});
}

void PeerDirectory::OnHandshaking(const std::string& peer, ConnectionId connection) {
  auto it = entries_.find(peer);
  if (it == entries_.end() || connection == 0 || it->second.connection != connection) return;
  if (it->second.state == PeerState::kConnecting) SetState(it->second, PeerState::kHandshaking);
}

std::optional<std::vector<ConnectWaiter>> PeerDirectory::OnClosed(const std::string& peer, ConnectionId connection,
                                                                  const std::string& error) {
  auto it = entries_.find(peer);
  if (it == entries_.end() || connection == 0 || it->second.connection != connection) return std::nullopt;
  PeerEntry& entry = it->second;
  entry.last_error = error;
  const bool never_ready = entry.state == PeerState::kConnecting || entry.state == PeerState::kHandshaking;
  entry.connection = 0;
  entry.idle_since = clock_();
  DropBindings(peer);
  if (never_ready && !shutting_down_) {
    entry.backoff = entry.backoff.count() == 0 ? session::Duration(kInitialBackoff)
                                               : std::min<session::Duration>(entry.backoff * 2, kMaxBackoff);
    entry.backoff_until = clock_() + entry.backoff;
    SetState(entry, PeerState::kBackoff);
  } else {
    SetState(entry, PeerState::kClosed);
  }
  return std::exchange(entry.connect_waiters, {});
}

void PeerDirectory::AddWaiter(const std::string& peer, ConnectWaiter waiter) {
  entries_[peer].connect_waiters.push_back(std::move(waiter));
}

ConnectionId PeerDirectory::Connection(const std::string& peer) const {
  auto it = entries_.find(peer);
  return it == entries_.end() ? 0 : it->second.connection;
}

size_t PeerDirectory::LivePeerCount() const {
  return std::count_if(entries_.begin(), entries_.end(), [](const auto& e) { return e.second.connection != 0; });
}

PeerCounters* PeerDirectory::Counters(const std::string& peer) {
  auto it = entries_.find(peer);
  return it == entries_.end() ? nullptr : &it->second.counters;
}

// An entry with no connection and nothing waiting on it holds only
// history (status, per-peer metrics); dropping it after reap_after keeps
// the number of entries bounded by the peers in use, whatever hosts were
// named or came and went. Supply bindings went with the last connection.
std::vector<std::pair<std::string, session::Duration>> PeerDirectory::Reap() {
  const auto now = clock_();
  std::vector<std::pair<std::string, session::Duration>> reaped;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const PeerEntry& entry = it->second;
    const bool idle = entry.connection == 0 && entry.connect_waiters.empty() &&
                      (entry.state == PeerState::kClosed || entry.state == PeerState::kBackoff);
    if (idle && now - entry.idle_since >= config_.reap_after) {
      reaped.emplace_back(it->first, now - entry.idle_since);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return reaped;
}

session::Duration PeerDirectory::ReapTick() const {
  return std::min<session::Duration>(
      kMaxReapTick, std::max<session::Duration>(config_.reap_after / 4, std::chrono::milliseconds(10)));
}

void PeerDirectory::Bind(const std::string& kv_request_id, const std::string& peer) { bindings_[kv_request_id] = peer; }

std::optional<std::string> PeerDirectory::BoundPeer(const std::string& kv_request_id) const {
  auto it = bindings_.find(kv_request_id);
  if (it == bindings_.end()) return std::nullopt;
  return it->second;
}

// A binding lives while its peer's session serves the request: every way
// that ends (the round's transfer, an abort, the round and unbound-store
// timeouts, the consumer's terminal fetch) reports the id, so the table
// never holds more ids than the sessions' own bounded rounds and jobs do
// (issue 11, finding 4). Checked against the peer's connection now, not
// the reporting one: within one batch a new fetch or a bound store may have
// made the request served again. A store after the unbinding waits as
// unbound supply for the request's next fetch, which binds it again.
void PeerDirectory::UnbindEnded(const std::string& kv_request_id, const std::string& peer, bool current_serves) {
  auto binding = bindings_.find(kv_request_id);
  if (binding == bindings_.end() || binding->second != peer) return;
  if (Connection(peer) != 0 && current_serves) return;
  bindings_.erase(binding);
}

void PeerDirectory::DropBindings(const std::string& peer) {
  std::erase_if(bindings_, [&](const auto& binding) { return binding.second == peer; });
}

void PeerDirectory::OnLoadStarted(session::JobId job) { loads_.try_emplace(job, LoadBudget{0, clock_()}); }

// Only a duplicate this node settled names the connection that carries the
// work on (the replacement); after the peer's "duplicate" or "idle" the
// probes are left to their engines, which ask again anyway, so a peer that
// closes every connection makes no dial the engines did not ask for.
bool PeerDirectory::HandBack(const std::string& peer, session::UnservedWork work, session::CloseCause cause,
                             const std::string& reason) {
  if (cause != session::CloseCause::kDuplicate) work.probes.clear();
  if (work.empty()) return false;  // nothing left to ask again: no resubmission at all
  const bool first = queue_.empty();
  queue_.push_back(Resubmission{peer, std::move(work), reason});
  return first;
}

// A load is asked again at most kMaxResubmits times, and only within one
// load timeout of its start (when the engine submitted it; security review,
// issue 25 item 6): a peer that holds each fetch and then closes cannot keep
// the engine's slots past about twice the load timeout.
std::optional<session::Duration> ResubmitTimeout(unsigned asked, unsigned max_asks, session::TimePoint started,
                                                 session::TimePoint now, session::Duration load_timeout) {
  if (asked >= max_asks) return std::nullopt;
  const session::TimePoint deadline = started + load_timeout;
  if (now >= deadline) return std::nullopt;
  return deadline - now;
}

ResubmitVerdict PeerDirectory::AllowResubmit(session::JobId job) {
  const session::TimePoint now = clock_();
  LoadBudget& budget = loads_.try_emplace(job, LoadBudget{0, now}).first->second;
  ResubmitVerdict verdict{false, budget.resubmits, {}};
  const std::optional<session::Duration> left =
      ResubmitTimeout(budget.resubmits, kMaxResubmits, budget.started, now, config_.load_timeout);
  if (left) {
    ++budget.resubmits;
    verdict.allowed = true;
    verdict.time_left = *left;
  }
  return verdict;
}

// The request finished while handed-back work of it waited for the
// resubmission: its loads fail now, as loads in flight do on finish
// (wire-protocol.md 7.5), so that nothing is written into their slots
// after it; its probes are dropped.
std::vector<session::JobId> PeerDirectory::FinishRequest(const std::string& peer, const std::string& kv_request_id) {
  std::vector<session::JobId> finished;
  for (Resubmission& queued : queue_) {
    if (queued.peer != peer) continue;
    std::erase_if(queued.work.probes, [&](const auto& probes) { return probes.kv_request_id == kv_request_id; });
    std::erase_if(queued.work.loads, [&](const session::UnservedLoad& load) {
      if (load.kv_request_id != kv_request_id) return false;
      finished.push_back(load.job_id);
      return true;
    });
  }
  return finished;
}

}  // namespace kvpeer::daemon
