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

// Out of descriptors or memory: how long the accept loop waits before it
// tries again, and how often it says so at most.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
constexpr auto kAcceptLogInterval = std::chrono::seconds(1);
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
      sink_(results),
      results_([this] { ScheduleDrain(); }),
      epoch_(RandomEpoch()),
      acceptor_(io),
      resolver_(io.get_executor()),
      directory_(PeerDirectoryConfig{config_.node_id, config_.max_peers, config_.reap_after, config_.load_timeout},
                 [] { return std::chrono::steady_clock::now(); }),
      reap_timer_(io),
      supply_timer_(io) {}

PeerManager::~PeerManager() = default;

StatusOr<uint16_t> PeerManager::Listen() {
  // Each failure is worded as the log has always shown it ("bind: Address
  // already in use", as Asio's throwing calls said it).
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(config_.listen_host, ec);
  if (ec) return Status::Unavailable("make_address: " + ec.message());
  const tcp::endpoint endpoint(address, config_.listen_port);
  if (acceptor_.open(endpoint.protocol(), ec); ec) return Status::Unavailable("open: " + ec.message());
  if (acceptor_.set_option(tcp::acceptor::reuse_address(true), ec); ec) {
    return Status::Unavailable("set_option: " + ec.message());
  }
  if (acceptor_.bind(endpoint, ec); ec) return Status::Unavailable("bind: " + ec.message());
  if (acceptor_.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return Status::Unavailable("listen: " + ec.message());
  }
  const tcp::endpoint bound = acceptor_.local_endpoint(ec);
  if (ec) return Status::Unavailable("local_endpoint: " + ec.message());
  asio::co_spawn(
      io_, [this]() { return AcceptLoop(); }, asio::detached);
  ScheduleReap();
  return bound.port();
}

std::string PeerManager::listen_address() const {
  boost::system::error_code ec;
  auto endpoint = acceptor_.local_endpoint(ec);
  if (ec) return config_.listen_host + ":" + std::to_string(config_.listen_port);
  return FormatHostPort({endpoint.address().to_string(), endpoint.port()});
}

session::SessionConfig PeerSessionConfig(const PeerManagerConfig& config, const ModelSettings& model,
                                         const std::string& epoch) {
  session::SessionConfig session;
  session.local_id = config.node_id;
  session.block_len = model.block_len;
  session.config_fingerprint = model.config_fingerprint;
  session.hash_seed = model.hash_seed;
  session.epoch = epoch;
  session.psk = config.psk;
  session.handshake_timeout = config.handshake_timeout;
  session.idle_timeout = config.idle_timeout;
  session.client.load_timeout = config.load_timeout;
  session.client.abort_ack_timeout = config.abort_ack_timeout;
  session.server.block_len = model.block_len;
  session.server.max_rounds = config.max_rounds_per_peer;
  session.server.round_timeout = config.round_timeout;
  session.server.unsupplied_timeout = config.unbound_timeout;
  session.server.store_timeout = config.unbound_timeout;
  session.server.max_round_key_bytes = config.max_round_key_bytes;
  session.features = config.features;
  session.random_token = CsprngToken;
  return session;
}

session::SessionConfig PeerManager::MakeSessionConfig() const {
  return PeerSessionConfig(config_, model_.settings(), epoch_);
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
  for (const auto& [id, connection] : connections_) {
    dialling += !connection->session_over() && !connection->session().ready() ? 1 : 0;
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

PeerConnection* PeerManager::Current(const std::string& peer) const {
  auto it = connections_.find(directory_.Connection(peer));
  return it == connections_.end() ? nullptr : it->second.get();
}

StatusOr<PeerConnection*> PeerManager::SessionFor(const std::string& peer) {
  if (!model_.configured()) {
    return Status::Unavailable("node not configured: no block_len/config_fingerprint/hash_seed yet");
  }
  if (shutting_down_) return Status::ShuttingDown(std::string(session::kDaemonShutdownReason));
  if (!SplitHostPort(peer)) return Status::Invalid("peer '" + peer + "' is not HOST:PORT");
  PeerRoute route = directory_.Acquire(peer);
  switch (route.kind) {
    case PeerRoute::Kind::kUse:
      break;
    case PeerRoute::Kind::kBackoff:
      return Status::Unavailable(route.why);
    case PeerRoute::Kind::kAtPeerLimit:
      limits_.Hit(counters_, Counter::kLimitMaxPeers, route.why);
      return Status::Unavailable(route.why);
    case PeerRoute::Kind::kDial:
      Dial(peer, route.connection);
      break;
  }
  PeerConnection* connection = Current(peer);
  if (connection == nullptr) return Status::Internal("peer " + peer + ": the directory routes to no connection");
  return connection;
}

void PeerManager::Dial(const std::string& peer, ConnectionId id) {
  const std::optional<HostPort> address = SplitHostPort(peer);  // SessionFor checked it
  ConnectionListener& listener = *this;
  auto connection =
      std::make_shared<PeerConnection>(MakeStream(tcp::socket(io_)), MakeSessionConfig(), index_, peer, listener);
  connections_[id] = connection;
  ApplyConnectionLimits(*connection);
  spdlog::info("peer {}: dialling", peer);
  connection->StartDial(address->host, std::to_string(address->port), resolver_);
}

PeerStream PeerManager::MakeStream(tcp::socket socket) const {
  if (config_.tls) return PeerStream(std::move(socket), *config_.tls);
  return PeerStream(std::move(socket));
}

void PeerManager::ApplyConnectionLimits(PeerConnection& connection) const {
  connection.set_max_queued_bytes(config_.max_queued_bytes);
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
  const std::string peer = connection.session().peer_id();
  const ConnectionId id = directory_.Connection(peer);
  if (Current(peer) != &connection) return;
  if (connection.session().ready()) {
    auto waiters = directory_.OnReady(peer, id);
    if (!waiters) return;
    spdlog::info("peer {} ({}): ready ({} connection)", peer, connection.remote_address(),
                 connection.dialled() ? "dialled" : "accepted");
    for (auto& done : *waiters) done(Status::Ok());
  } else if (connection.session().state() == session::PeerSession::State::kHandshaking &&
             connection.bytes_received() > 0) {
    directory_.OnHandshaking(peer, id);
  }
}

namespace {

session::ConnectionFacts FactsOf(const PeerConnection& connection) {
  const auto& connect = connection.session().peer_connect();
  return session::ConnectionFacts{connection.session().ready(), connection.dialled(),
                                  connect ? connect->epoch : std::string()};
}

}  // namespace

void PeerManager::AdoptInbound(PeerConnection& connection) {
  auto self = connection.shared_from_this();
  const std::string peer = connection.session().peer_id();
  std::optional<session::ConnectionFacts> existing;
  const ConnectionId previous = directory_.Connection(peer);
  if (const PeerConnection* current = Current(peer); current != nullptr && !current->session_over()) {
    existing = FactsOf(*current);
  }
  const Adoption adoption = directory_.Adopt(peer, existing, FactsOf(connection));
  switch (adoption.kind) {
    case Adoption::Kind::kTooManyPeers:
      limits_.Hit(counters_, Counter::kLimitMaxPeers,
                  "refused peer " + peer + " (" + connection.remote_address() + "): max-peers (" +
                      std::to_string(config_.max_peers) + ") reached; sent disconnect 'too many peers'");
      connection.Close(session::CloseCause::kTooManyPeers, FixedReason(kTooManyPeers));
      return;
    case Adoption::Kind::kCloseNew:
      connection.Close(session::CloseCause::kDuplicate, FixedReason(kDuplicate));
      return;
    case Adoption::Kind::kSupersede:
      if (adoption.cause == session::CloseCause::kPeerRestarted) {
        spdlog::info("peer {}: restarted (new epoch); closing the old session", peer);
      }
      connections_[adoption.connection] = self;
      Supersede(peer, adoption.old, adoption.cause, adoption.reason);
      return;
    case Adoption::Kind::kAdopt:
      // The state becomes ready (and waiters are answered) in OnSessionActivity.
      connections_.erase(previous);
      connections_[adoption.connection] = self;
      return;
  }
}

// The replacement is already the peer's connection when the old one
// closes: what the old one hands back (its unserved work, its waiters) then
// finds the replacement.
void PeerManager::Supersede(const std::string& peer, ConnectionId old_id, session::CloseCause cause,
                            session::PeerDisconnectReason reason) {
  auto it = connections_.find(old_id);
  if (it == connections_.end()) return;
  std::shared_ptr<PeerConnection> old = std::move(it->second);
  connections_.erase(it);
  old->Close(cause, FixedReason(reason));
  AccountEnded(peer, *old);  // after the close: its disconnect counts too
  // Lookups waiting on the old session ask again (the replacement has their
  // probes) unless its requests failed with it (a restart).
  results_.OnProbesChanged(peer, !old->session().hands_back_work());
}

void PeerManager::AccountEnded(const std::string& peer, const PeerConnection& connection) {
  PeerCounters* counters = directory_.Counters(peer);
  if (counters == nullptr) return;
  counters->bytes_sent += connection.bytes_sent();
  counters->bytes_received += connection.bytes_received();
  counters->stats += connection.stats();
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
  // Posted: the close that handed the work back may be inside another
  // connection's step (AdoptInbound), and by the time the post runs the
  // replacement is the peer's connection.
  if (!results.unserved.empty() &&
      directory_.HandBack(peer, std::move(results.unserved), session.close_cause(), session.close_reason())) {
    asio::post(io_, [this] { ResubmitQueued(); });
  }
}

void PeerManager::ScheduleDrain() {
  asio::post(io_, [this, alive = std::weak_ptr<char>(alive_)] {
    if (!alive.expired()) DrainResults();
  });
}

void PeerManager::DrainResults() { results_.Drain(sink_); }

void PeerManager::ReportLoadResult(const std::string& peer, const session::JobResult& result) {
  directory_.OnLoadEnded(result.job_id);
  metrics_.RecordLoadResult(directory_.Counters(peer), peer, result);
  results_.OnLoadResult(result);
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
  const std::string peer = connection.session().peer_id();
  const ConnectionId id = directory_.Connection(peer);
  auto it = connections_.find(id);
  if (it == connections_.end() || it->second != self) return;
  AccountEnded(peer, connection);
  connections_.erase(it);
  const std::string error = connection.session().close_reason();
  auto waiters = directory_.OnClosed(peer, id, error);
  for (auto& done : waiters.value_or(std::vector<ConnectWaiter>{})) {
    done(Status::Unavailable("peer " + peer + ": " + error));
  }
  results_.OnProbesChanged(peer, true);
}

// ---------------------------------------------------------------------------
// Operator operations

void PeerManager::Connect(const std::string& peer, std::function<void(Status)> done) {
  StatusOr<PeerConnection*> connection = SessionFor(peer);
  if (!connection.ok()) {
    done(connection.status());
    return;
  }
  if ((*connection)->session().ready()) {
    done(Status::Ok());
    return;
  }
  directory_.AddWaiter(peer, std::move(done));
}

Status PeerManager::Disconnect(const std::string& peer) {
  PeerConnection* current = Current(peer);
  if (current == nullptr || current->session_over()) return Status::NotFound("no session with peer '" + peer + "'");
  auto connection = current->shared_from_this();  // keeps it alive through Close
  connection->Close(session::CloseCause::kOperator, FixedReason(kDisconnectedByOperator));
  return Status::Ok();
}

void PeerManager::Shutdown(const std::string& reason) {
  shutting_down_ = true;
  directory_.BeginShutdown();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  supply_timer_.cancel();
  reap_timer_.cancel();
  std::vector<std::shared_ptr<PeerConnection>> handshaking;
  for (const auto& [connection, source] : handshaking_) handshaking.push_back(connection);
  for (auto& connection : handshaking)
    connection->Close(session::CloseCause::kShutdown, reason, true, session::JobFailure::kShutdown);
  std::vector<std::shared_ptr<PeerConnection>> sessions;
  for (const auto& [peer, entry] : directory_.entries()) {
    if (PeerConnection* connection = Current(peer)) sessions.push_back(connection->shared_from_this());
  }
  for (auto& connection : sessions) {
    connection->Close(session::CloseCause::kShutdown, reason, true, session::JobFailure::kShutdown);
  }
  for (const auto& failed : unbound_supply_.CancelAll(session::JobFailure::kShutdown, reason)) {
    results_.OnStoreResult(failed);
  }
  ResubmitQueued();  // handed-back loads fail now (shutting down), not after the loop stops
  DrainResults();    // and every result reaches its engine before the loop stops
}

// ---------------------------------------------------------------------------
// Reaping idle peer entries

void PeerManager::ScheduleReap() {
  if (shutting_down_) return;
  reap_timer_.expires_after(directory_.ReapTick());
  reap_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) ReapIdlePeers();
  });
}

void PeerManager::ReapIdlePeers() {
  for (const auto& [peer, idle] : directory_.Reap()) {
    spdlog::debug("peer {}: entry removed after {} s without a connection", peer,
                  std::chrono::duration_cast<std::chrono::seconds>(idle).count());
    metrics_.CountReaped();
  }
  ScheduleReap();
}

void PeerManager::OnLookupAnswered(session::Duration round_trip) { metrics_.RecordLookupRoundTrip(round_trip); }

void PeerManager::OnLookupResp(PeerConnection& connection) {
  results_.OnProbesChanged(connection.session().peer_id(), false);
}

std::vector<PeerSnapshot> PeerManager::PeerSnapshots() const {
  std::vector<PeerSnapshot> snapshots;
  snapshots.reserve(directory_.entries().size());
  for (const auto& [peer_id, entry] : directory_.entries()) {
    snapshots.push_back(
        metrics_.Snapshot(peer_id, entry.state, entry.since, entry.last_error, entry.counters, Current(peer_id)));
  }
  return snapshots;
}

void PeerManager::CollectMetrics(metrics::Registry& registry) const {
  metrics_.CollectMetrics(registry, Handshaking(), unbound_supply_.size());
}

}  // namespace kvpeer::daemon
