#include "daemon/peer_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "daemon/random_token.h"
#include "daemon/rfc3339.h"
#include "protocol/codec.h"
#include "protocol/frame.h"
#include "protocol/type_names.h"
#include "session/connection_arbiter.h"

namespace kvpeer::daemon {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto kInitialBackoff = std::chrono::milliseconds(100);
constexpr auto kMaxBackoff = std::chrono::seconds(5);

// Histogram buckets. Lookup round trips: 100 us (same rack) to 2.5 s (a
// stalled peer). Loads: 1 ms to the 30 s default load timeout and beyond.
// Transfer sizes: 4 KiB to 4 GiB in powers of 4.
const std::vector<double> kLookupRoundTripBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
const std::vector<double> kLoadSecondsBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                 0.5,   1,      2.5,   5,    10,    30,   60};
const std::vector<double> kLoadBytesBuckets = {4096.0,      16384.0,      65536.0,       262144.0,
                                               1048576.0,   4194304.0,    16777216.0,    67108864.0,
                                               268435456.0, 1073741824.0, 4294967296.0};

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

const char* StateName(int state) {
  static const char* const kNames[] = {"connecting", "handshaking", "ready", "backoff", "closed"};
  return kNames[state];
}

// "host:port" -> host, port; the port is whatever follows the last colon,
// so "[::1]:5710" and "node-a:5710" both work.
bool SplitPeer(const std::string& peer, std::string* host, std::string* port) {
  auto colon = peer.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == peer.size()) return false;
  *host = peer.substr(0, colon);
  *port = peer.substr(colon + 1);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  return true;
}

}  // namespace

PeerManager::PeerManager(asio::io_context& io, PeerManagerConfig config, NodeModel& model,
                         session::BlockIndex& index, ResultSink& results)
    : io_(io),
      config_(std::move(config)),
      model_(model),
      index_(index),
      results_(results),
      epoch_(RandomEpoch()),
      acceptor_(io),
      supply_timer_(io),
      lookup_round_trip_(kLookupRoundTripBuckets),
      load_seconds_succeeded_(kLoadSecondsBuckets),
      load_seconds_failed_(kLoadSecondsBuckets),
      load_bytes_(kLoadBytesBuckets) {}

PeerManager::~PeerManager() = default;

uint16_t PeerManager::Listen() {
  tcp::endpoint endpoint(asio::ip::make_address(config_.listen_host), config_.listen_port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen();
  asio::co_spawn(io_, [this]() { return AcceptLoop(); }, asio::detached);
  return acceptor_.local_endpoint().port();
}

std::string PeerManager::listen_address() const {
  boost::system::error_code ec;
  auto endpoint = acceptor_.local_endpoint(ec);
  if (ec) return config_.listen_host + ":" + std::to_string(config_.listen_port);
  std::string host = endpoint.address().to_string();
  if (endpoint.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(endpoint.port());
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
  session.client.load_timeout = config_.load_timeout;
  session.client.abort_ack_timeout = config_.abort_ack_timeout;
  session.server.block_len = model.block_len;
  session.server.max_rounds = config_.max_rounds_per_peer;
  session.random_token = RandomNonce;
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
      spdlog::warn("accept failed: {}", ec.message());
      continue;
    }
    OnAccepted(std::move(socket));
  }
}

void PeerManager::OnAccepted(tcp::socket socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  if (ec) return;
  if (config_.allow_address && !config_.allow_address(remote.address())) {
    ++refused_allowlist_;
    if (counters_ != nullptr) counters_->Add("peer_connections_refused_allow_cidr");
    spdlog::warn("refused peer connection from {}: address not in allow-cidr", remote.address().to_string());
    return;  // closed before a byte is read
  }
  // Connections not identified yet are capped too: each holds a session
  // and a read buffer until its handshake completes or times out.
  const bool too_many = config_.max_peers != 0 && unidentified_.size() >= config_.max_peers;
  if (shutting_down_ || !model_.configured() || too_many) {
    std::string reason = shutting_down_         ? "shutting down"
                         : !model_.configured() ? "node not configured"
                                                : "too many peers";
    if (too_many && !shutting_down_ && model_.configured()) {
      limits_.Hit(counters_, "limit_max_peers",
                  "refused peer connection from " + remote.address().to_string() + ": max-peers (" +
                      std::to_string(config_.max_peers) + ") connections are still in their handshake");
    }
    // Over TLS nothing can be said before a handshake: the socket just closes.
    if (!config_.tls) {
      std::string bytes = protocol::EncodeFrame(protocol::Disconnect{reason}, 0);
      socket.non_blocking(true, ec);
      socket.write_some(asio::buffer(bytes), ec);
    }
    ++refused_unavailable_;
    spdlog::info("refused peer connection from {}: {}", remote.address().to_string(), reason);
    return;
  }
  ConnectionListener& listener = *this;
  auto connection =
      std::make_shared<PeerConnection>(MakeStream(std::move(socket)), MakeSessionConfig(), index_, "", listener);
  ApplyConnectionLimits(*connection);
  unidentified_.insert(connection);
  connection->StartAccepted();
}

PeerConnection* PeerManager::SessionFor(const std::string& peer, ApiStatus* error) {
  if (!model_.configured()) {
    *error = Fail(ErrorCode::kPeerUnavailable, "node not configured: no block_len/config_fingerprint/hash_seed yet");
    return nullptr;
  }
  if (shutting_down_) {
    *error = Fail(ErrorCode::kShuttingDown, "kvpeerd is shutting down");
    return nullptr;
  }
  std::string host, port;
  if (!SplitPeer(peer, &host, &port)) {
    *error = Fail(ErrorCode::kBadRequest, "peer '" + peer + "' is not HOST:PORT");
    return nullptr;
  }
  const bool known = peers_.contains(peer);
  Peer& entry = peers_[peer];
  if (entry.connection && !entry.connection->closed()) return entry.connection.get();
  if (entry.state == PeerState::kBackoff && std::chrono::steady_clock::now() < entry.backoff_until) {
    *error = Fail(ErrorCode::kPeerUnavailable, "peer " + peer + " is unreachable (" +
                                                   entry.last_error.value_or("unknown error") +
                                                   "); retrying after backoff");
    return nullptr;
  }
  if (AtPeerLimit()) {
    const std::string why = "max-peers (" + std::to_string(config_.max_peers) +
                            ") reached: not dialling peer " + peer + " while " +
                            std::to_string(LivePeerCount()) + " peer sessions are open";
    if (!known) peers_.erase(peer);  // a peer never dialled is not listed
    limits_.Hit(counters_, "limit_max_peers", why);
    *error = Fail(ErrorCode::kPeerUnavailable, why);
    return nullptr;
  }
  Dial(peer, entry);
  return entry.connection.get();
}

void PeerManager::Dial(const std::string& peer, Peer& entry) {
  std::string host, port;
  SplitPeer(peer, &host, &port);
  ConnectionListener& listener = *this;
  entry.connection =
      std::make_shared<PeerConnection>(MakeStream(tcp::socket(io_)), MakeSessionConfig(), index_, peer, listener);
  ApplyConnectionLimits(*entry.connection);
  SetState(entry, PeerState::kConnecting);
  ++entry.dials;
  spdlog::info("peer {}: dialling", peer);
  entry.connection->StartDial(host, port);
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
  std::string counter = "limit_" + std::string(limit);
  std::replace(counter.begin(), counter.end(), '-', '_');
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

void PeerManager::OnSessionActivity(PeerConnection& connection) {
  if (!connection.dialled() && unidentified_.count(connection.shared_from_this()) &&
      connection.session().peer_connect()) {
    AdoptInbound(connection);
  }
  DeliverResults(connection);
  auto it = peers_.find(connection.session().peer_id());
  if (it == peers_.end() || it->second.connection.get() != &connection) return;
  Peer& entry = it->second;
  if (connection.session().ready() && entry.state != PeerState::kReady) {
    SetState(entry, PeerState::kReady);
    entry.backoff = std::chrono::milliseconds(0);
    entry.last_error.reset();
    ++entry.sessions_ready;
    spdlog::info("peer {} ({}): ready ({} connection)", it->first, connection.remote_address(),
                 connection.dialled() ? "dialled" : "accepted");
    for (auto& done : std::exchange(entry.connect_waiters, {})) done(std::nullopt);
  } else if (entry.state == PeerState::kConnecting && connection.session().state() ==
                                                          session::PeerSession::State::kHandshaking &&
             connection.bytes_received() > 0) {
    SetState(entry, PeerState::kHandshaking);
  }
}

void PeerManager::AdoptInbound(PeerConnection& connection) {
  auto self = connection.shared_from_this();
  unidentified_.erase(self);
  const std::string& peer = connection.session().peer_id();
  auto known = peers_.find(peer);
  const bool live = known != peers_.end() && known->second.connection && !known->second.connection->closed();
  if (!live && AtPeerLimit()) {
    limits_.Hit(counters_, "limit_max_peers",
                "refused peer " + peer + " (" + connection.remote_address() + "): max-peers (" +
                    std::to_string(config_.max_peers) + ") reached; sent disconnect 'too many peers'");
    connection.Close("too many peers");
    return;
  }
  Peer& entry = peers_[peer];
  if (entry.connection && !entry.connection->closed()) {
    session::ConnectionFacts existing{entry.connection->session().ready(), entry.connection->dialled(),
                                      entry.connection->session().peer_connect()
                                          ? entry.connection->session().peer_connect()->epoch
                                          : std::string()};
    session::ConnectionFacts incoming{false, false, connection.session().peer_connect()->epoch};
    switch (session::ArbitrateConnections(config_.node_id, peer, existing, incoming)) {
      case session::Arbitration::kCloseNewDuplicate:
        connection.Close("duplicate");
        return;
      case session::Arbitration::kCloseOldDuplicate:
        entry.connection->Close("duplicate");
        break;
      case session::Arbitration::kReplaceOld:
        spdlog::info("peer {}: restarted (new epoch); closing the old session", peer);
        entry.connection->Close("peer restarted");
        break;
      case session::Arbitration::kKeepBoth:
        break;
    }
  }
  entry.connection = self;
  SetState(entry, connection.session().ready() ? PeerState::kReady : PeerState::kHandshaking);
}

void PeerManager::DeliverResults(PeerConnection& connection) {
  session::SessionResults results = connection.session().TakeResults();
  const std::string& peer = connection.session().peer_id();
  if (!results.loads.empty()) {
    auto it = peers_.find(peer);
    Peer* entry = it == peers_.end() ? nullptr : &it->second;
    for (const auto& load : results.loads) RecordLoadResult(entry, peer, load);
  }
  for (const auto& load : results.loads) results_.OnLoadResult(load);
  for (const auto& store : results.stores) results_.OnStoreResult(store);
  for (const auto& kv : results.failed_request_ids) results_.OnRequestFailed(peer, kv);
  for (const auto& kv : results.new_fetch_ids) BindSupply(connection, kv);
}

void PeerManager::RecordLoadResult(Peer* entry, const std::string& peer, const session::JobResult& result) {
  auto start = load_starts_.find(result.job_id);
  std::optional<LoadStart> started;
  if (start != load_starts_.end()) {
    started = start->second;
    load_starts_.erase(start);
  }
  const double seconds = started ? Seconds(std::chrono::steady_clock::now() - started->at) : 0;
  if (result.success) {
    if (entry != nullptr) ++entry->loads_succeeded;
    if (started) {
      load_seconds_succeeded_.Observe(seconds);
      load_bytes_.Observe(static_cast<double>(started->bytes));
    }
    spdlog::debug("peer {}: load (node job {}) of kv_request_id {} done: {} bytes in {:.3f} ms", peer,
                  result.job_id, result.kv_request_id, started ? started->bytes : 0, seconds * 1e3);
    return;
  }
  if (entry != nullptr) ++entry->loads_failed[ClassifyLoadFailure(result.reason)];
  if (started) load_seconds_failed_.Observe(seconds);
  spdlog::info("peer {}: load (node job {}) of kv_request_id {} failed: {}", peer, result.job_id,
               result.kv_request_id, result.reason);
}

void PeerManager::OnLookupAnswered(session::Duration round_trip) { lookup_round_trip_.Observe(Seconds(round_trip)); }

void PeerManager::RecordClose(const PeerConnection& connection) {
  const std::string& reason = connection.session().close_reason();
  const std::string& peer_id = connection.session().peer_id();
  const std::string peer = peer_id.empty() ? "(unidentified)" : peer_id;
  const std::string address = connection.remote_address();
  const auto& violation = connection.violation();
  const size_t handshake_kind = ClassifyHandshakeFailure(reason, violation.has_value());
  const bool refused = !connection.closed_by_owner() && IsHandshakeRefusal(handshake_kind);
  if (!connection.ever_ready() || refused) {
    // Closing a connection on purpose (duplicate, shutdown, operator)
    // before its handshake completed is no failure of the handshake.
    if (connection.closed_by_owner()) {
      spdlog::info("peer {} ({}): closed during the handshake: {}", peer, address, reason);
      return;
    }
    const size_t kind = handshake_kind;
    ++handshake_failures_[kind];
    if (violation && kHandshakeFailureLabels[kind] == "protocol_violation") ++violations_[*violation];
    spdlog::warn("peer {} ({}): handshake failed ({}): {}", peer, address, kHandshakeFailureLabels[kind], reason);
    return;
  }
  const size_t kind = ClassifySessionClose(reason, violation.has_value());
  ++sessions_closed_[kind];
  const ConnectionStats& stats = connection.stats();
  uint64_t frames_sent = 0, frames_received = 0;
  for (uint64_t n : stats.frames_sent) frames_sent += n;
  for (uint64_t n : stats.frames_received) frames_received += n;
  if (violation) {
    ++violations_[*violation];
    spdlog::warn("peer {} ({}): protocol violation ({}): {}; disconnected", peer, address, *violation, reason);
    return;
  }
  spdlog::info("peer {} ({}): session closed ({}): {}; sent {} frames / {} bytes, received {} frames / {} bytes",
               peer, address, kSessionCloseLabels[kind], reason, frames_sent, connection.bytes_sent(),
               frames_received, connection.bytes_received());
}

// Wire spec section 5: the side that finds a missing or wrong proof closes
// with "authentication failed"; the other side learns it from the
// disconnect. Both are counted (status.counters) and logged by RecordClose.
void PeerManager::CountAuthFailure(const PeerConnection& connection) {
  if (counters_ == nullptr) return;
  // (Without a key of its own a node may have been ready already.)
  const std::string& reason = connection.session().close_reason();
  if (reason == "authentication failed") {
    counters_->Add("auth_failures");  // the peer's proof was missing or wrong
  } else if (reason == "peer disconnected: authentication failed") {
    counters_->Add("auth_rejected_by_peer");  // the peer refused our proof
  }
}

void PeerManager::OnConnectionClosed(PeerConnection& connection) {
  auto self = connection.shared_from_this();
  unidentified_.erase(self);
  RecordClose(connection);
  CountAuthFailure(connection);
  auto it = peers_.find(connection.session().peer_id());
  if (it == peers_.end() || it->second.connection != self) return;
  Peer& entry = it->second;
  entry.bytes_sent_closed += connection.bytes_sent();
  entry.bytes_received_closed += connection.bytes_received();
  entry.stats_closed += connection.stats();
  entry.last_error = connection.session().close_reason();
  bool never_ready = entry.state == PeerState::kConnecting || entry.state == PeerState::kHandshaking;
  entry.connection.reset();
  for (auto binding = supply_bindings_.begin(); binding != supply_bindings_.end();) {
    binding = binding->second == it->first ? supply_bindings_.erase(binding) : std::next(binding);
  }
  if (never_ready && !shutting_down_) {
    entry.backoff = entry.backoff.count() == 0 ? session::Duration(kInitialBackoff)
                                               : std::min<session::Duration>(entry.backoff * 2, kMaxBackoff);
    entry.backoff_until = std::chrono::steady_clock::now() + entry.backoff;
    SetState(entry, PeerState::kBackoff);
  } else {
    SetState(entry, PeerState::kClosed);
  }
  for (auto& done : std::exchange(entry.connect_waiters, {})) {
    done(Fail(ErrorCode::kPeerUnavailable, "peer " + it->first + ": " + *entry.last_error));
  }
}

// ---------------------------------------------------------------------------
// Engine work

ApiStatus PeerManager::Lookup(const std::string& peer, const std::string& kv_request_id,
                              const std::vector<protocol::Key>& keys, bool flush,
                              std::vector<session::ProbeAnswer>* answers) {
  answers->clear();
  ApiStatus error;
  PeerConnection* connection = SessionFor(peer, &error);
  if (connection == nullptr) {
    if (error && error->code != ErrorCode::kPeerUnavailable) return error;
    // Wire spec section 1: while the peer backs off, probes answer miss at once.
    answers->assign(keys.size(), session::ProbeAnswer::kMiss);
    return std::nullopt;
  }
  if (config_.max_pending_lookups != 0) {
    const size_t probes = connection->session().ProbesWith(kv_request_id, keys);
    if (probes > config_.max_pending_lookups) {
      const std::string why = "max-pending-lookups (" + std::to_string(config_.max_pending_lookups) +
                              ") reached: kv_request_id '" + kv_request_id + "' would hold " +
                              std::to_string(probes) + " distinct probes on peer " + peer +
                              "; load or finish the request first, or raise --max-pending-lookups";
      limits_.Hit(counters_, "limit_max_pending_lookups", why);
      return Fail(ErrorCode::kBadRequest, why);
    }
  }
  for (const auto& key : keys) answers->push_back(connection->session().RegisterLookup(kv_request_id, key));
  if (flush) connection->session().FlushPendingLookups();
  connection->AfterExternalOp();
  return std::nullopt;
}

size_t PeerManager::FlushLookups() {
  size_t sent = 0;
  for (auto& [peer, entry] : peers_) {
    if (!entry.connection || entry.connection->closed()) continue;
    sent += entry.connection->session().FlushPendingLookups();
    entry.connection->AfterExternalOp();
  }
  return sent;
}

ApiStatus PeerManager::Load(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                            std::vector<protocol::Key> keys, std::vector<protocol::BlockIndex> block_ids,
                            session::SlotSinkRef sink) {
  ApiStatus error;
  PeerConnection* connection = SessionFor(peer, &error);
  if (connection == nullptr) {
    if (error && error->code == ErrorCode::kPeerUnavailable) {
      if (auto it = peers_.find(peer); it != peers_.end()) ++it->second.loads_rejected;
    }
    return error;
  }
  const LoadStart start{std::chrono::steady_clock::now(), keys.size() * model_.settings().block_len};
  Status status =
      connection->session().RequestBlocks(job_id, kv_request_id, std::move(keys), std::move(block_ids), sink);
  if (status.ok()) load_starts_[job_id] = start;
  connection->AfterExternalOp();
  if (!status.ok()) {
    ErrorCode code = status.code() == Status::Code::kInvalid ? ErrorCode::kBadRequest : ErrorCode::kPeerUnavailable;
    return Fail(code, status.message());
  }
  return std::nullopt;
}

void PeerManager::Store(session::JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                        std::vector<session::PinRef> blocks) {
  auto binding = supply_bindings_.find(kv_request_id);
  if (binding != supply_bindings_.end()) {
    auto peer = peers_.find(binding->second);
    if (peer != peers_.end() && peer->second.connection && !peer->second.connection->closed()) {
      peer->second.connection->session().AddSupply(job_id, kv_request_id, std::move(keys), std::move(blocks));
      peer->second.connection->AfterExternalOp();
      return;
    }
  }
  unbound_supply_.Add(job_id, kv_request_id, std::move(keys), std::move(blocks), std::chrono::steady_clock::now());
  SweepUnboundSupply();
}

void PeerManager::BindSupply(PeerConnection& connection, const std::string& kv_request_id) {
  supply_bindings_[kv_request_id] = connection.session().peer_id();
  for (auto& job : unbound_supply_.Take(kv_request_id)) {
    connection.session().AddSupply(job.job_id, kv_request_id, std::move(job.keys), std::move(job.blocks));
  }
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
    auto it = peers_.find(peer);
    if (it == peers_.end() || !it->second.connection || it->second.connection->closed()) continue;
    it->second.connection->session().FinishClient(kv_request_id);
    it->second.connection->AfterExternalOp();
  }
  if (!producer) return;
  // Unbound supply stays: a prefiller finishes its request before the
  // decoder fetches, and the supply must still meet that fetch.
  supply_bindings_.erase(kv_request_id);
  for (auto& [peer, entry] : peers_) {
    if (!entry.connection || entry.connection->closed()) continue;
    entry.connection->session().FinishServer(kv_request_id);
    entry.connection->AfterExternalOp();
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

void PeerManager::Connect(const std::string& peer, std::function<void(ApiStatus)> done) {
  ApiStatus error;
  PeerConnection* connection = SessionFor(peer, &error);
  if (connection == nullptr) {
    done(error);
    return;
  }
  if (connection->session().ready()) {
    done(std::nullopt);
    return;
  }
  peers_[peer].connect_waiters.push_back(std::move(done));
}

ApiStatus PeerManager::Disconnect(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end() || !it->second.connection || it->second.connection->closed()) {
    return Fail(ErrorCode::kNotFound, "no session with peer '" + peer + "'");
  }
  auto connection = it->second.connection;  // keeps it alive through Close
  connection->Close("disconnected by operator");
  return std::nullopt;
}

boost::json::array PeerManager::PeersStatus() const {
  boost::json::array peers;
  for (const auto& [peer_id, entry] : peers_) {
    boost::json::object peer;
    const PeerConnection* connection = entry.connection.get();
    peer["peer_id"] = peer_id;
    peer["state"] = StateName(static_cast<int>(entry.state));
    peer["since"] = FormatRfc3339(entry.since);
    auto rtt = connection ? connection->session().rtt() : std::nullopt;
    if (rtt) {
      peer["rtt_us"] = std::chrono::duration_cast<std::chrono::microseconds>(*rtt).count();
    } else {
      peer["rtt_us"] = nullptr;
    }
    peer["bytes_sent"] = entry.bytes_sent_closed + (connection ? connection->bytes_sent() : 0);
    peer["bytes_received"] = entry.bytes_received_closed + (connection ? connection->bytes_received() : 0);
    peer["loads_in_flight"] = connection ? connection->session().LoadsInFlight() : 0;
    peer["rounds_serving"] = connection ? connection->session().RoundsServing() : 0;
    // Beyond the spec's fields: what the limits watch (max-rounds-per-peer,
    // max-queued-bytes), for the current connection.
    peer["rounds_open"] = connection ? connection->session().RoundsOpen() : 0;
    peer["queued_bytes"] = connection ? connection->queued_bytes() : 0;
    peer["queued_bytes_peak"] = connection ? connection->queued_bytes_peak() : 0;
    if (entry.last_error) {
      peer["last_error"] = *entry.last_error;
    } else {
      peer["last_error"] = nullptr;
    }
    peers.push_back(std::move(peer));
  }
  return peers;
}

void PeerManager::CollectMetrics(metrics::Registry& registry) const {
  auto& frames_sent = registry.Counter("kvpeer_peer_frames_sent_total", "Frames written to the peer, by message type.",
                                       {"peer", "type"});
  auto& frames_received = registry.Counter("kvpeer_peer_frames_received_total",
                                           "Frames received from the peer, by message type.", {"peer", "type"});
  auto& keys_sent = registry.Counter("kvpeer_peer_lookup_keys_sent_total",
                                     "Keys this node probed on the peer (keys of lookup messages sent).", {"peer"});
  auto& hits_received = registry.Counter("kvpeer_peer_lookup_hits_received_total",
                                         "Keys the peer answered hit (in lookup_resp messages received).", {"peer"});
  auto& keys_served = registry.Counter("kvpeer_peer_lookup_keys_served_total",
                                       "Keys the peer probed on this node (keys of lookup messages received).",
                                       {"peer"});
  auto& hits_served = registry.Counter("kvpeer_peer_lookup_hits_served_total",
                                       "Keys of the peer's probes this node answered hit.", {"peer"});
  auto& loads = registry.Counter("kvpeer_peer_loads_total",
                                 "Loads from the peer by outcome (succeeded, failed, rejected) and reason.",
                                 {"peer", "outcome", "reason"});
  auto& dials = registry.Counter("kvpeer_peer_dials_total", "Connection attempts this node made to the peer.", {"peer"});
  auto& sessions = registry.Counter("kvpeer_peer_sessions_total",
                                    "Sessions with the peer that completed the handshake.", {"peer"});
  auto& queue = registry.Gauge("kvpeer_peer_write_queue_frames",
                               "Frames queued on the peer's connection and not yet written.", {"peer"});
  auto& queue_bytes = registry.Gauge("kvpeer_peer_write_queue_bytes",
                                     "Bytes of the frames queued on the peer's connection (max-queued-bytes applies).",
                                     {"peer"});
  auto& rtt = registry.Gauge("kvpeer_peer_rtt_seconds", "Last ping round trip to the peer.", {"peer"});
  const auto type_name = [](size_t index) {
    return index < protocol::kKnownTypeNames.size() ? protocol::kKnownTypeNames[index] : std::string_view("unknown");
  };
  for (const auto& [peer, entry] : peers_) {
    const PeerConnection* connection = entry.connection.get();
    ConnectionStats stats = entry.stats_closed;
    if (connection != nullptr) stats += connection->stats();
    for (size_t i = 0; i < ConnectionStats::kMessageKinds; ++i) {
      if (stats.frames_sent[i] > 0) frames_sent.Add({peer, type_name(i)}, stats.frames_sent[i]);
      if (stats.frames_received[i] > 0) frames_received.Add({peer, type_name(i)}, stats.frames_received[i]);
    }
    keys_sent.Add({peer}, stats.lookup_keys_sent);
    hits_received.Add({peer}, stats.lookup_hits_received);
    keys_served.Add({peer}, stats.lookup_keys_served);
    hits_served.Add({peer}, stats.lookup_hits_served);
    loads.Add({peer, "succeeded", "none"}, entry.loads_succeeded);
    for (size_t i = 0; i < kLoadFailureLabels.size(); ++i) {
      if (entry.loads_failed[i] > 0) loads.Add({peer, "failed", kLoadFailureLabels[i]}, entry.loads_failed[i]);
    }
    if (entry.loads_rejected > 0) loads.Add({peer, "rejected", "peer_unavailable"}, entry.loads_rejected);
    dials.Add({peer}, entry.dials);
    sessions.Add({peer}, entry.sessions_ready);
    queue.Set({peer}, connection != nullptr ? static_cast<double>(connection->write_queue_depth()) : 0.0);
    queue_bytes.Set({peer}, connection != nullptr ? static_cast<double>(connection->queued_bytes()) : 0.0);
    if (auto measured = connection != nullptr ? connection->session().rtt() : std::nullopt) {
      rtt.Set({peer}, Seconds(*measured));
    }
  }

  auto& handshakes = registry.Counter("kvpeer_peer_handshake_failures_total",
                                      "Peer connections that ended before the handshake completed, by reason.",
                                      {"reason"});
  for (size_t i = 0; i < kHandshakeFailureLabels.size(); ++i) {
    handshakes.Add({kHandshakeFailureLabels[i]}, handshake_failures_[i]);
  }
  auto& closed = registry.Counter("kvpeer_peer_sessions_closed_total",
                                  "Ready peer sessions that ended, by reason.", {"reason"});
  for (size_t i = 0; i < kSessionCloseLabels.size(); ++i) closed.Add({kSessionCloseLabels[i]}, sessions_closed_[i]);
  auto& violations = registry.Counter("kvpeer_peer_protocol_violations_total",
                                      "Protocol violations by peers that this node disconnected for, by reason.",
                                      {"reason"});
  for (const auto& [label, count] : violations_) violations.Add({label}, count);
  auto& refused = registry.Counter("kvpeer_peer_connections_refused_total",
                                   "Inbound peer connections refused before the handshake, by reason.", {"reason"});
  refused.Add({"allow_cidr"}, refused_allowlist_);
  refused.Add({"unavailable"}, refused_unavailable_);
  registry.Gauge("kvpeer_unbound_store_jobs", "Store jobs waiting for a peer to fetch them (not bound to a session).")
      .Set({}, static_cast<double>(unbound_supply_.size()));

  registry
      .Histogram("kvpeer_lookup_round_trip_seconds",
                 "Time from sending a lookup to a peer to receiving its lookup_resp.", kLookupRoundTripBuckets)
      .Merge({}, lookup_round_trip_);
  auto& load_seconds = registry.Histogram("kvpeer_load_duration_seconds",
                                          "Time from a load's fetch to its result, by outcome.", kLoadSecondsBuckets,
                                          {"outcome"});
  load_seconds.Merge({"succeeded"}, load_seconds_succeeded_);
  load_seconds.Merge({"failed"}, load_seconds_failed_);
  registry
      .Histogram("kvpeer_load_transfer_bytes", "Bytes moved by each successful load (blocks times block_len).",
                 kLoadBytesBuckets)
      .Merge({}, load_bytes_);
}

void PeerManager::Shutdown(const std::string& reason) {
  shutting_down_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  supply_timer_.cancel();
  for (auto& connection : std::vector<std::shared_ptr<PeerConnection>>(unidentified_.begin(), unidentified_.end())) {
    connection->Close(reason);
  }
  for (auto& [peer, entry] : peers_) {
    if (auto connection = entry.connection) connection->Close(reason);
  }
  for (const auto& failed : unbound_supply_.CancelAll(reason)) results_.OnStoreResult(failed);
}

}  // namespace kvpeer::daemon
