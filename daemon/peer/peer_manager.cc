#include "daemon/peer/peer_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/host_port.h"
#include "base/random_token.h"
#include "daemon/node/node_epoch.h"
#include "protocol/codec.h"
#include "protocol/frame.h"
#include "session/connection_arbiter.h"
#include "session/peer_disconnect_reason.h"

namespace kvpeer::daemon {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// The reasons kvpeerd sends word for word come from the one table that also
// parses them (session/peer_disconnect_reason.h), so the two cannot drift.
using session::PeerDisconnectReason::kDisconnectedByOperator;
using session::PeerDisconnectReason::kDuplicate;
using session::PeerDisconnectReason::kNodeNotConfigured;
using session::PeerDisconnectReason::kPeerRestarted;
using session::PeerDisconnectReason::kShuttingDown;
using session::PeerDisconnectReason::kTooManyPeers;

std::string FixedReason(session::PeerDisconnectReason reason) { return session::DisconnectReasonText(reason); }

constexpr auto kInitialBackoff = std::chrono::milliseconds(100);
constexpr auto kMaxBackoff = std::chrono::seconds(5);
// Out of descriptors or memory: how long the accept loop waits before it
// tries again, and how often it says so at most.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
constexpr auto kAcceptLogInterval = std::chrono::seconds(1);
// The reaper looks at most this long after an entry became reapable.
constexpr auto kMaxReapTick = std::chrono::seconds(1);
// How often one load handed back by superseded sessions is asked again: a
// crossed first dial needs one or two (docs/wire-protocol.md, section 9,
// "(f) Work on a superseded connection"); more means the peer keeps
// superseding its own connections, and the load fails.
constexpr unsigned kMaxResubmits = 4;

bool IsResourceExhaustion(const boost::system::error_code& ec) {
  return ec == boost::asio::error::no_descriptors || ec == boost::asio::error::no_buffer_space ||
         ec == boost::asio::error::no_memory ||
         (ec.category() == boost::system::system_category() && ec.value() == ENFILE);
}

}  // namespace

PeerManager::PeerManager(asio::io_context& io, PeerManagerConfig config, NodeModel& model,
                         session::PublishedBlocks& index, ResultSink& results)
    : io_(io),
      config_(std::move(config)),
      model_(model),
      index_(index),
      results_(results),
      epoch_(RandomEpoch()),
      acceptor_(io),
      resolver_(io.get_executor()),
      reap_timer_(io),
      supply_timer_(io) {}

PeerManager::~PeerManager() = default;

StatusOr<uint16_t> PeerManager::Listen() {
  // Asio's throwing calls word the failure as the log has always shown it
  // ("bind: Address already in use"); it leaves here as a value.
  try {
    tcp::endpoint endpoint(asio::ip::make_address(config_.listen_host), config_.listen_port);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen();
  } catch (const boost::system::system_error& error) {
    return Status::Unavailable(error.what());
  }
  asio::co_spawn(io_, [this]() { return AcceptLoop(); }, asio::detached);
  ScheduleReap();
  return acceptor_.local_endpoint().port();
}

std::string PeerManager::listen_address() const {
  boost::system::error_code ec;
  auto endpoint = acceptor_.local_endpoint(ec);
  if (ec) return config_.listen_host + ":" + std::to_string(config_.listen_port);
  return FormatHostPort({endpoint.address().to_string(), endpoint.port()});
}

session::SessionConfig PeerManager::MakeSessionConfig() const {
  session::SessionConfig session;
  ModelSettings model = model_.settings();
  session.local_id = config_.node_id;
  session.block_len = model.block_len;
  session.config_fingerprint = model.config_fingerprint;
  session.hash_seed = model.hash_seed;
  session.epoch = epoch_;
  session.psk = config_.psk;
  session.handshake_timeout = config_.handshake_timeout;
  session.idle_timeout = config_.idle_timeout;
  session.client.load_timeout = config_.load_timeout;
  session.client.abort_ack_timeout = config_.abort_ack_timeout;
  session.server.block_len = model.block_len;
  session.server.max_rounds = config_.max_rounds_per_peer;
  session.server.round_timeout = config_.round_timeout;
  session.server.unsupplied_timeout = config_.unbound_timeout;
  session.server.store_timeout = config_.unbound_timeout;
  session.server.max_round_key_bytes = config_.max_round_key_bytes;
  session.features = config_.features;
  session.random_token = CsprngToken;
  return session;
}

// ---------------------------------------------------------------------------
// Accepting and dialling

asio::awaitable<void> PeerManager::AcceptLoop() {
  while (acceptor_.is_open()) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      co_await OnAcceptFailed(ec);
      continue;
    }
    OnAccepted(std::move(socket));
  }
}

asio::awaitable<void> PeerManager::OnAcceptFailed(const boost::system::error_code& ec) {
  const uint64_t accept_failures = metrics_.CountAcceptFailure();
  const auto now = std::chrono::steady_clock::now();
  if (accept_failures == 1 || now - accept_failure_logged_ >= kAcceptLogInterval) {
    spdlog::warn("peer accept failed: {} ({} more failures since the last such line)", ec.message(),
                 accept_failures_unlogged_);
    accept_failure_logged_ = now;
    accept_failures_unlogged_ = 0;
  } else {
    ++accept_failures_unlogged_;
  }
  if (!IsResourceExhaustion(ec)) co_return;
  asio::steady_timer pause(io_);
  pause.expires_after(kAcceptPause);
  boost::system::error_code ignored;
  co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
}

bool PeerManager::AdmitHandshake(const std::string& source) {
  const auto per_source = handshaking_per_source_.find(source);
  const size_t from_source = per_source == handshaking_per_source_.end() ? 0 : per_source->second;
  if (config_.max_handshaking != 0 && handshaking_.size() >= config_.max_handshaking) {
    metrics_.CountRefused(ConnectionRefusal::kMaxHandshaking);
    limits_.Hit(counters_, Counter::kLimitMaxHandshaking,
                "closed peer connection from " + source + " before reading it: max-handshaking (" +
                    std::to_string(config_.max_handshaking) + ") connections are still in their handshake");
    return false;
  }
  if (config_.max_handshaking_per_source != 0 && from_source >= config_.max_handshaking_per_source) {
    metrics_.CountRefused(ConnectionRefusal::kMaxHandshakingPerSource);
    limits_.Hit(counters_, Counter::kLimitMaxHandshakingPerSource,
                "closed peer connection from " + source + " before reading it: max-handshaking-per-source (" +
                    std::to_string(config_.max_handshaking_per_source) +
                    ") connections from that address are still in their handshake");
    return false;
  }
  return true;
}

bool PeerManager::ForgetHandshaking(const std::shared_ptr<PeerConnection>& connection) {
  auto it = handshaking_.find(connection);
  if (it == handshaking_.end()) return false;
  auto per_source = handshaking_per_source_.find(it->second);
  if (per_source != handshaking_per_source_.end() && --per_source->second == 0) {
    handshaking_per_source_.erase(per_source);
  }
  handshaking_.erase(it);
  return true;
}

size_t PeerManager::Handshaking() const {
  size_t dialling = 0;
  for (const auto& [peer, entry] : peers_) {
    const auto& connection = entry.connection;
    dialling += connection && !connection->closed() && !connection->session().ready() ? 1 : 0;
  }
  return handshaking_.size() + dialling;
}

void PeerManager::OnAccepted(tcp::socket socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  if (ec) return;
  if (config_.allow_address && !config_.allow_address(remote.address())) {
    metrics_.CountRefused(ConnectionRefusal::kAllowCidr);
    if (counters_ != nullptr) counters_->Add(Counter::kPeerConnectionsRefusedAllowCidr);
    spdlog::warn("refused peer connection from {}: address not in allow-cidr", remote.address().to_string());
    return;  // closed before a byte is read
  }
  // Wire spec section 4, item 6: each connection still handshaking holds a
  // session and a read buffer until it is ready or times out, so their
  // number is bounded; one beyond is closed at once, unread (no disconnect:
  // writing to a flood would only feed it).
  const std::string source = remote.address().to_string();
  if (!AdmitHandshake(source)) return;
  if (shutting_down_ || !model_.configured()) {
    std::string reason = FixedReason(shutting_down_ ? kShuttingDown : kNodeNotConfigured);
    // Over TLS nothing can be said before a handshake: the socket just closes.
    if (!config_.tls) {
      std::string bytes = protocol::EncodeFrame(protocol::Disconnect{reason}, 0);
      socket.non_blocking(true, ec);
      socket.write_some(asio::buffer(bytes), ec);
    }
    metrics_.CountRefused(ConnectionRefusal::kUnavailable);
    spdlog::info("refused peer connection from {}: {}", remote.address().to_string(), reason);
    return;
  }
  ConnectionListener& listener = *this;
  auto connection =
      std::make_shared<PeerConnection>(MakeStream(std::move(socket)), MakeSessionConfig(), index_, "", listener);
  ApplyConnectionLimits(*connection);
  handshaking_.emplace(connection, source);
  ++handshaking_per_source_[source];
  connection->StartAccepted();
}

PeerConnection* PeerManager::SessionFor(const std::string& peer, Status* error) {
  if (!model_.configured()) {
    *error = Status::Unavailable("node not configured: no block_len/config_fingerprint/hash_seed yet");
    return nullptr;
  }
  if (shutting_down_) {
    *error = Status::ShuttingDown(std::string(session::kDaemonShutdownReason));
    return nullptr;
  }
  if (!SplitHostPort(peer)) {
    *error = Status::Invalid("peer '" + peer + "' is not HOST:PORT");
    return nullptr;
  }
  const bool known = peers_.contains(peer);
  Peer& entry = peers_[peer];
  if (entry.connection && !entry.connection->closed()) return entry.connection.get();
  if (entry.state == PeerState::kBackoff && std::chrono::steady_clock::now() < entry.backoff_until) {
    *error = Status::Unavailable("peer " + peer + " is unreachable (" +
                                     entry.last_error.value_or("unknown error") +
                                     "); retrying after backoff");
    return nullptr;
  }
  if (AtPeerLimit()) {
    const std::string why = "max-peers (" + std::to_string(config_.max_peers) +
                            ") reached: not dialling peer " + peer + " while " +
                            std::to_string(LivePeerCount()) + " peer sessions are open";
    if (!known) peers_.erase(peer);  // a peer never dialled is not listed
    limits_.Hit(counters_, Counter::kLimitMaxPeers, why);
    *error = Status::Unavailable(why);
    return nullptr;
  }
  Dial(peer, entry);
  return entry.connection.get();
}

void PeerManager::Dial(const std::string& peer, Peer& entry) {
  const std::optional<HostPort> address = SplitHostPort(peer);  // SessionFor checked it
  ConnectionListener& listener = *this;
  entry.connection =
      std::make_shared<PeerConnection>(MakeStream(tcp::socket(io_)), MakeSessionConfig(), index_, peer, listener);
  ApplyConnectionLimits(*entry.connection);
  SetState(entry, PeerState::kConnecting);
  ++entry.counters.dials;
  spdlog::info("peer {}: dialling", peer);
  entry.connection->StartDial(address->host, std::to_string(address->port), resolver_);
}

PeerStream PeerManager::MakeStream(tcp::socket socket) const {
  if (config_.tls) return PeerStream(std::move(socket), *config_.tls);
  return PeerStream(std::move(socket));
}

void PeerManager::ApplyConnectionLimits(PeerConnection& connection) const {
  connection.set_max_queued_bytes(config_.max_queued_bytes);
}

size_t PeerManager::LivePeerCount() const {
  size_t live = 0;
  for (const auto& [peer, entry] : peers_) live += entry.connection && !entry.connection->closed() ? 1 : 0;
  return live;
}

void PeerManager::OnLimitHit(PeerConnection& connection, std::string_view limit, uint64_t count,
                             const std::string& detail) {
  const Counter counter = LimitCounter(limit);
  if (counters_ != nullptr && count > 1) counters_->Add(counter, count - 1);  // Hit counts one
  const std::string& peer = connection.session().peer_id();
  limits_.Hit(counters_, counter,
              "peer " + (peer.empty() ? std::string("(unidentified)") : peer) + " (" + connection.remote_address() +
                  "): " + std::string(limit) + ": " + detail);
}

void PeerManager::SetState(Peer& entry, PeerState state) {
  if (entry.state == state) return;
  entry.state = state;
  entry.since = std::chrono::system_clock::now();
}

// ---------------------------------------------------------------------------
// Session activity

void PeerManager::OnSessionActivity(PeerConnection& connection, session::PeerSession& session) {
  auto self = connection.shared_from_this();
  if (handshaking_.contains(self)) {
    // Nothing before authentication: ready is reached only with the peer's
    // valid connect_ack (and proof), and until then the connection holds no
    // work and touches no peer entry.
    if (!connection.session().ready()) return;
    ForgetHandshaking(self);
    AdoptInbound(connection);
  }
  DeliverResults(connection, session);
  auto it = peers_.find(connection.session().peer_id());
  if (it == peers_.end() || it->second.connection.get() != &connection) return;
  Peer& entry = it->second;
  if (connection.session().ready() && entry.state != PeerState::kReady) {
    SetState(entry, PeerState::kReady);
    entry.backoff = std::chrono::milliseconds(0);
    entry.last_error.reset();
    ++entry.counters.sessions_ready;
    spdlog::info("peer {} ({}): ready ({} connection)", it->first, connection.remote_address(),
                 connection.dialled() ? "dialled" : "accepted");
    for (auto& done : std::exchange(entry.connect_waiters, {})) done(Status::Ok());
  } else if (entry.state == PeerState::kConnecting && connection.session().state() ==
                                                          session::PeerSession::State::kHandshaking &&
             connection.bytes_received() > 0) {
    SetState(entry, PeerState::kHandshaking);
  }
}

void PeerManager::AdoptInbound(PeerConnection& connection) {
  auto self = connection.shared_from_this();
  const std::string& peer = connection.session().peer_id();
  auto known = peers_.find(peer);
  const bool live = known != peers_.end() && known->second.connection && !known->second.connection->closed();
  if (!live && AtPeerLimit()) {
    limits_.Hit(counters_, Counter::kLimitMaxPeers,
                "refused peer " + peer + " (" + connection.remote_address() + "): max-peers (" +
                    std::to_string(config_.max_peers) + ") reached; sent disconnect 'too many peers'");
    connection.Close(session::CloseCause::kTooManyPeers, FixedReason(kTooManyPeers));
    return;
  }
  Peer& entry = peers_[peer];
  if (entry.connection && !entry.connection->closed()) {
    session::ConnectionFacts existing{entry.connection->session().ready(), entry.connection->dialled(),
                                      entry.connection->session().peer_connect()
                                          ? entry.connection->session().peer_connect()->epoch
                                          : std::string()};
    session::ConnectionFacts incoming{true, false, connection.session().peer_connect()->epoch};
    switch (session::ArbitrateConnections(config_.node_id, peer, existing, incoming)) {
      case session::Arbitration::kCloseNewDuplicate:
        connection.Close(session::CloseCause::kDuplicate, FixedReason(kDuplicate));
        return;
      case session::Arbitration::kCloseOldDuplicate:
        Supersede(peer, entry, self, session::CloseCause::kDuplicate, kDuplicate);
        return;
      case session::Arbitration::kReplaceOld:
        spdlog::info("peer {}: restarted (new epoch); closing the old session", peer);
        Supersede(peer, entry, self, session::CloseCause::kPeerRestarted, kPeerRestarted);
        return;
      case session::Arbitration::kKeepBoth:
        break;
    }
  }
  // The state becomes ready (and waiters are answered) in OnSessionActivity.
  entry.connection = self;
}

void PeerManager::Supersede(const std::string& peer, Peer& entry, std::shared_ptr<PeerConnection> replacement,
                            session::CloseCause cause, session::PeerDisconnectReason reason) {
  std::shared_ptr<PeerConnection> old = std::exchange(entry.connection, std::move(replacement));
  DropSupplyBindings(peer);
  old->Close(cause, FixedReason(reason));
  AccountEnded(entry, *old);  // after the close: its disconnect counts too
  // Lookups waiting on the old session ask again (the replacement has their
  // probes) unless its requests failed with it (a restart).
  results_.OnProbesChanged(peer, !old->session().hands_back_work());
}

void PeerManager::AccountEnded(Peer& entry, const PeerConnection& connection) {
  entry.counters.bytes_sent += connection.bytes_sent();
  entry.counters.bytes_received += connection.bytes_received();
  entry.counters.stats += connection.stats();
}

void PeerManager::DropSupplyBindings(const std::string& peer) {
  std::erase_if(supply_bindings_, [&](const auto& binding) { return binding.second == peer; });
}

void PeerManager::DeliverResults(PeerConnection& connection, session::PeerSession& session) {
  session::SessionResults results = session.TakeResults();
  const std::string& peer = connection.session().peer_id();
  for (const auto& failure : results.checksum_failures) metrics_.RecordChecksumFailure(peer, failure);
  for (const auto& load : results.loads) ReportLoadResult(peer, load);
  for (const auto& store : results.stores) results_.OnStoreResult(store);
  for (const auto& kv : results.failed_request_ids) results_.OnRequestFailed(peer, kv);
  // A fetch that reached a session which closed in the same step (a
  // duplicate settled at ready, say) binds nothing: supply handed to a
  // closed session would fail, and the consumer asks again elsewhere.
  if (session.ready()) {
    for (const auto& kv : results.new_fetch_ids) BindSupply(session, kv);
  }
  for (const auto& kv : results.ended_fetch_ids) UnbindEndedSupply(connection, kv);
  CountRoundEvents(connection, results.round_events);
  if (!results.unserved.empty()) {
    // Only a duplicate this node settled names the connection that carries
    // the work on (the replacement); after the peer's "duplicate" or
    // "idle" the probes are left to their engines, which ask again anyway.
    const bool replaced_here = session.close_cause() == session::CloseCause::kDuplicate;
    if (!replaced_here) results.unserved.probes.clear();
    if (!results.unserved.empty()) QueueResubmission(peer, std::move(results.unserved), session.close_reason());
  }
}

void PeerManager::ReportLoadResult(const std::string& peer, const session::JobResult& result) {
  resubmits_per_load_.erase(result.job_id);
  auto it = peers_.find(peer);
  metrics_.RecordLoadResult(it == peers_.end() ? nullptr : &it->second.counters, peer, result);
  results_.OnLoadResult(result);
}

// ---------------------------------------------------------------------------
// Work handed back by a superseded session (docs/wire-protocol.md, section 9,
// "(f) Work on a superseded connection")

void PeerManager::QueueResubmission(const std::string& peer, session::UnservedWork work, const std::string& reason) {
  // Posted: the close that handed the work back may be inside another
  // connection's step (AdoptInbound), and by the time the post runs the
  // replacement is the peer's connection.
  if (resubmissions_.empty()) asio::post(io_, [this] { ResubmitQueued(); });
  resubmissions_.push_back(Resubmission{peer, std::move(work), reason});
}

void PeerManager::ResubmitQueued() {
  for (Resubmission& queued : std::exchange(resubmissions_, {})) {
    spdlog::info("peer {}: asking again for {} loads and the probes of {} requests that a superseded connection "
                 "handed back ({})",
                 queued.peer, queued.work.loads.size(), queued.work.probes.size(), queued.reason);
    for (session::UnservedLoad& load : queued.work.loads) ResubmitLoad(queued.peer, std::move(load), queued.reason);
    // Probes go to the replacement this node chose (DeliverResults), never
    // to a new dial: a peer that keeps closing its connections as idle or
    // duplicate then makes no dial the engines did not ask for.
    for (const session::UnservedProbes& probes : queued.work.probes) {
      std::vector<session::ProbeAnswer> answers;
      if (!Lookup(queued.peer, probes.kv_request_id, probes.keys, /*flush=*/true, &answers).ok()) {
        results_.OnRequestFailed(queued.peer, probes.kv_request_id);
      }
    }
    if (!queued.work.probes.empty()) results_.OnProbesChanged(queued.peer, false);
  }
}

// The request finished while handed-back work of it waited for
// ResubmitQueued: its loads fail now, as loads in flight do on finish
// (wire-protocol.md 7.5), so that nothing is written into their slots
// after it; its probes are dropped.
void PeerManager::FinishResubmissions(const std::string& peer, const std::string& kv_request_id) {
  std::vector<session::JobId> finished;
  for (Resubmission& queued : resubmissions_) {
    if (queued.peer != peer) continue;
    std::erase_if(queued.work.probes, [&](const auto& probes) { return probes.kv_request_id == kv_request_id; });
    std::erase_if(queued.work.loads, [&](const session::UnservedLoad& load) {
      if (load.kv_request_id != kv_request_id) return false;
      finished.push_back(load.job_id);
      return true;
    });
  }
  for (session::JobId job_id : finished) {
    ReportLoadResult(peer, session::JobResult{job_id, kv_request_id, false, "request finished",
                                              session::JobFailure::kRequestFinished});
  }
}

// A load is asked again at most kMaxResubmits times, and only within one
// load timeout of its start, with what is left of that timeout: a peer that
// holds each fetch and then closes cannot keep the engine's slots past one
// load timeout (ResubmitTimeout).
void PeerManager::ResubmitLoad(const std::string& peer, session::UnservedLoad load, const std::string& reason) {
  const session::JobId job_id = load.job_id;
  const std::string kv_request_id = load.kv_request_id;
  const auto now = std::chrono::steady_clock::now();
  Resubmits& asked = resubmits_per_load_.try_emplace(job_id, Resubmits{0, now}).first->second;
  Status status = Status::Unavailable(reason + "; asked again " + std::to_string(asked.count) + " times");
  const std::optional<session::Duration> left =
      ResubmitTimeout(asked.count, kMaxResubmits, asked.started, now, config_.load_timeout);
  if (left) {
    ++asked.count;
    status = LoadWithin(job_id, peer, kv_request_id, std::move(load.keys), std::move(load.block_indexes),
                        std::move(load.sink), left);
    if (status.ok()) return;
  } else if (asked.count < kMaxResubmits) {
    status = Status::Unavailable(reason + "; not asked again: the load timeout (" +
                                 std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                    config_.load_timeout).count()) +
                                 " s) since the load's start has passed");
  }
  const auto failure = shutting_down_ ? session::JobFailure::kShutdown : session::JobFailure::kSessionClosed;
  ReportLoadResult(peer, session::JobResult{job_id, kv_request_id, false, status.message(), failure});
}

std::optional<session::Duration> ResubmitTimeout(unsigned asked, unsigned max_asks, session::TimePoint started,
                                                 session::TimePoint now, session::Duration load_timeout) {
  if (asked >= max_asks) return std::nullopt;
  const session::TimePoint deadline = started + load_timeout;
  if (now >= deadline) return std::nullopt;
  return deadline - now;
}

// The server role's round bounds (wire-protocol.md section 6): timeouts are
// counted; key-byte refusals are limit hits (counted and logged).
void PeerManager::CountRoundEvents(PeerConnection& connection, const session::RoundEvents& events) {
  if (events.empty()) return;
  if (counters_ != nullptr) {
    if (events.lookup_rounds_expired > 0) counters_->Add(Counter::kRoundsExpiredLookup, events.lookup_rounds_expired);
    if (events.fetches_unsupplied > 0) counters_->Add(Counter::kRoundsExpiredUnsupplied, events.fetches_unsupplied);
  }
  if (events.lookups_over_key_bytes > 0) {
    OnLimitHit(connection, "max-round-key-bytes", events.lookups_over_key_bytes, "answered a lookup all-miss");
  }
  if (events.fetches_over_key_bytes > 0) {
    OnLimitHit(connection, "max-round-key-bytes", events.fetches_over_key_bytes, "failed a fetch");
  }
}

void PeerManager::OnConnectionClosed(PeerConnection& connection) {
  auto self = connection.shared_from_this();
  const bool never_adopted = ForgetHandshaking(self);
  metrics_.RecordClose(connection);
  metrics_.CountAuthFailure(connection);
  if (never_adopted) return;  // it never had a peer entry
  auto it = peers_.find(connection.session().peer_id());
  if (it == peers_.end() || it->second.connection != self) return;
  Peer& entry = it->second;
  AccountEnded(entry, connection);
  entry.last_error = connection.session().close_reason();
  bool never_ready = entry.state == PeerState::kConnecting || entry.state == PeerState::kHandshaking;
  entry.connection.reset();
  entry.idle_since = std::chrono::steady_clock::now();
  DropSupplyBindings(it->first);
  if (never_ready && !shutting_down_) {
    entry.backoff = entry.backoff.count() == 0 ? session::Duration(kInitialBackoff)
                                               : std::min<session::Duration>(entry.backoff * 2, kMaxBackoff);
    entry.backoff_until = std::chrono::steady_clock::now() + entry.backoff;
    SetState(entry, PeerState::kBackoff);
  } else {
    SetState(entry, PeerState::kClosed);
  }
  for (auto& done : std::exchange(entry.connect_waiters, {})) {
    done(Status::Unavailable("peer " + it->first + ": " + *entry.last_error));
  }
  results_.OnProbesChanged(it->first, true);
}

// ---------------------------------------------------------------------------
// Engine work

Status PeerManager::Lookup(const std::string& peer, const std::string& kv_request_id,
                              const std::vector<protocol::Key>& keys, bool flush,
                              std::vector<session::ProbeAnswer>* answers) {
  answers->clear();
  Status error;
  PeerConnection* connection = SessionFor(peer, &error);
  if (connection == nullptr) {
    if (!error.ok() && error.code() != Status::Code::kUnavailable) return error;
    // Wire spec section 1: while the peer backs off, probes answer miss at once.
    answers->assign(keys.size(), session::ProbeAnswer::kMiss);
    return Status::Ok();
  }
  if (config_.max_pending_lookups != 0) {
    const size_t probes = connection->session().ProbesWith(kv_request_id, keys);
    if (probes > config_.max_pending_lookups) {
      const std::string why = "max-pending-lookups (" + std::to_string(config_.max_pending_lookups) +
                              ") reached: kv_request_id '" + kv_request_id + "' would hold " +
                              std::to_string(probes) + " distinct probes on peer " + peer +
                              "; load or finish the request first, or raise --max-pending-lookups";
      limits_.Hit(counters_, Counter::kLimitMaxPendingLookups, why);
      return Status::Invalid(why);
    }
  }
  connection->WithSession([&](session::PeerSession& session) {
    for (const auto& key : keys) answers->push_back(session.RegisterLookup(kv_request_id, key));
    if (flush) session.FlushPendingLookups();
  });
  return Status::Ok();
}

size_t PeerManager::FlushLookups() {
  size_t sent = 0;
  for (auto& [peer, entry] : peers_) {
    if (!entry.connection || entry.connection->closed()) continue;
    sent += entry.connection->WithSession([](session::PeerSession& session) { return session.FlushPendingLookups(); });
  }
  return sent;
}

Status PeerManager::Load(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                            std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> slots,
                            session::SlotSinkRef sink) {
  return LoadWithin(job_id, peer, kv_request_id, std::move(keys), std::move(slots), std::move(sink), std::nullopt);
}

Status PeerManager::LoadWithin(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                               std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> slots,
                               session::SlotSinkRef sink, std::optional<session::Duration> timeout) {
  Status error;
  PeerConnection* connection = SessionFor(peer, &error);
  if (connection == nullptr) {
    if (!error.ok() && error.code() == Status::Code::kUnavailable) {
      if (auto it = peers_.find(peer); it != peers_.end()) ++it->second.counters.loads_rejected;
    }
    return error;
  }
  const uint64_t load_bytes = keys.size() * model_.settings().block_len;
  // The start is noted before the after-step, which may already report the load's result.
  Status status = connection->WithSession([&](session::PeerSession& session) {
    Status requested =
        session.RequestBlocks(job_id, kv_request_id, std::move(keys), std::move(slots), sink, timeout);
    if (requested.ok()) {
      metrics_.RecordLoadStart(job_id, load_bytes);
      // The load's start, kept when it is asked again (ResubmitLoad).
      resubmits_per_load_.try_emplace(job_id, Resubmits{0, std::chrono::steady_clock::now()});
    }
    return requested;
  });
  // Any failure but the caller's own request means the peer cannot serve it.
  if (!status.ok() && status.code() != Status::Code::kInvalid) return Status::Unavailable(status.message());
  return status;
}

void PeerManager::Store(session::JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                        std::vector<session::PinRef> blocks) {
  auto binding = supply_bindings_.find(kv_request_id);
  if (binding != supply_bindings_.end()) {
    auto peer = peers_.find(binding->second);
    if (peer != peers_.end() && peer->second.connection && !peer->second.connection->closed()) {
      peer->second.connection->WithSession([&](session::PeerSession& session) {
        session.AddSupply(job_id, kv_request_id, std::move(keys), std::move(blocks));
      });
      return;
    }
  }
  unbound_supply_.Add(job_id, kv_request_id, std::move(keys), std::move(blocks), std::chrono::steady_clock::now());
  SweepUnboundSupply();
}

void PeerManager::BindSupply(session::PeerSession& session, const std::string& kv_request_id) {
  supply_bindings_[kv_request_id] = session.peer_id();
  for (auto& job : unbound_supply_.Take(kv_request_id)) {
    session.AddSupply(job.job_id, kv_request_id, std::move(job.keys), std::move(job.blocks));
  }
}

// A binding lives while its peer's session serves the request: every way
// that ends (the round's transfer, an abort, the round and unbound-store
// timeouts, the consumer's terminal fetch) reports the id, so the table
// never holds more ids than the sessions' own bounded rounds and jobs do
// (issue 11, finding 4). Checked against the peer's connection now, not
// the reporting one: within one batch a new fetch or a bound store may have
// made the request served again. A store after the unbinding waits as
// unbound supply for the request's next fetch, which binds it again.
void PeerManager::UnbindEndedSupply(PeerConnection& connection, const std::string& kv_request_id) {
  auto binding = supply_bindings_.find(kv_request_id);
  if (binding == supply_bindings_.end() || binding->second != connection.session().peer_id()) return;
  auto peer = peers_.find(binding->second);
  const PeerConnection* current = peer == peers_.end() ? nullptr : peer->second.connection.get();
  if (current != nullptr && current->session().ServesRequest(kv_request_id)) return;
  supply_bindings_.erase(binding);
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
    auto it = peers_.find(peer);
    if (it == peers_.end() || !it->second.connection || it->second.connection->closed()) continue;
    it->second.connection->WithSession([&](session::PeerSession& session) { session.FinishClient(kv_request_id); });
  }
  if (!producer) return;
  // Unbound supply stays: a prefiller finishes its request before the
  // decoder fetches, and the supply must still meet that fetch.
  supply_bindings_.erase(kv_request_id);
  for (auto& [peer, entry] : peers_) {
    if (!entry.connection || entry.connection->closed()) continue;
    entry.connection->WithSession([&](session::PeerSession& session) { session.FinishServer(kv_request_id); });
  }
}

size_t PeerManager::LoadsInFlight() const {
  size_t total = 0;
  for (const auto& [peer, entry] : peers_) {
    if (entry.connection && !entry.connection->closed()) total += entry.connection->session().LoadsInFlight();
  }
  return total;
}

// ---------------------------------------------------------------------------
// Operator operations

void PeerManager::Connect(const std::string& peer, std::function<void(Status)> done) {
  Status error;
  PeerConnection* connection = SessionFor(peer, &error);
  if (connection == nullptr) {
    done(error);
    return;
  }
  if (connection->session().ready()) {
    done(Status::Ok());
    return;
  }
  peers_[peer].connect_waiters.push_back(std::move(done));
}

Status PeerManager::Disconnect(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end() || !it->second.connection || it->second.connection->closed()) {
    return Status::NotFound("no session with peer '" + peer + "'");
  }
  auto connection = it->second.connection;  // keeps it alive through Close
  connection->Close(session::CloseCause::kOperator, FixedReason(kDisconnectedByOperator));
  return Status::Ok();
}

void PeerManager::Shutdown(const std::string& reason) {
  shutting_down_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  supply_timer_.cancel();
  reap_timer_.cancel();
  std::vector<std::shared_ptr<PeerConnection>> handshaking;
  for (const auto& [connection, source] : handshaking_) handshaking.push_back(connection);
  for (auto& connection : handshaking)
    connection->Close(session::CloseCause::kShutdown, reason, true, session::JobFailure::kShutdown);
  for (auto& [peer, entry] : peers_) {
    if (auto connection = entry.connection)
      connection->Close(session::CloseCause::kShutdown, reason, true, session::JobFailure::kShutdown);
  }
  for (const auto& failed : unbound_supply_.CancelAll(session::JobFailure::kShutdown, reason)) {
    results_.OnStoreResult(failed);
  }
  ResubmitQueued();  // handed-back loads fail now (shutting down), not after the loop stops
}

// ---------------------------------------------------------------------------
// Reaping idle peer entries

void PeerManager::ScheduleReap() {
  if (shutting_down_) return;
  const auto tick = std::min<session::Duration>(kMaxReapTick, std::max<session::Duration>(config_.reap_after / 4,
                                                                                        std::chrono::milliseconds(10)));
  reap_timer_.expires_after(tick);
  reap_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) ReapIdlePeers();
  });
}

// An entry with no connection and nothing waiting on it holds only
// history (status, per-peer metrics); dropping it after reap_after keeps
// the number of entries bounded by the peers in use, whatever hosts were
// named or came and went. Supply bindings went with the last connection.
void PeerManager::ReapIdlePeers() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = peers_.begin(); it != peers_.end();) {
    const Peer& entry = it->second;
    const bool idle = !entry.connection && entry.connect_waiters.empty() &&
                      (entry.state == PeerState::kClosed || entry.state == PeerState::kBackoff);
    if (idle && now - entry.idle_since >= config_.reap_after) {
      spdlog::debug("peer {}: entry removed after {} s without a connection", it->first,
                    std::chrono::duration_cast<std::chrono::seconds>(now - entry.idle_since).count());
      metrics_.CountReaped();
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
  ScheduleReap();
}

void PeerManager::OnLookupAnswered(session::Duration round_trip) { metrics_.RecordLookupRoundTrip(round_trip); }

void PeerManager::OnLookupResp(PeerConnection& connection) {
  results_.OnProbesChanged(connection.session().peer_id(), false);
}

std::vector<PeerSnapshot> PeerManager::PeerSnapshots() const {
  std::vector<PeerSnapshot> snapshots;
  snapshots.reserve(peers_.size());
  for (const auto& [peer_id, entry] : peers_) {
    snapshots.push_back(
        metrics_.Snapshot(peer_id, entry.state, entry.since, entry.last_error, entry.counters, entry.connection.get()));
  }
  return snapshots;
}

void PeerManager::CollectMetrics(metrics::Registry& registry) const {
  metrics_.CollectMetrics(registry, Handshaking(), unbound_supply_.size());
}

}  // namespace kvpeer::daemon
