// PeerManager: the peer side of the daemon's I/O. It owns the acceptor, the
// resolver, the timers and one PeerConnection per peer, and asks its
// PeerDirectory (peer_directory.h) for every decision: which connection
// carries a peer's work, which of two crossed or duplicate connections
// survives, when to back off and reap, where store supply goes, and what
// handed-back work is asked again. Engines' work goes to the chosen session
// (peer_manager_work.cc), and every result goes back through the
// ResultSink. What it reports (close and load logs and counters, status,
// metrics) its PeerMetrics records (peer_metrics.h).
//
// Nothing before authentication (wire spec section 4, item 6): an accepted
// connection is held apart, in handshaking_, until its session is ready;
// only then does it get (or join) a peer entry. What it said before that
// creates no entry, closes nothing and is counted per peer nowhere.
// Accepted connections still handshaking are bounded in all and per source
// address, and peer entries left with no connection and no work are reaped,
// so neither grows with what unauthenticated hosts do.
//
// Thread-safety: everything runs on the daemon's one io_context.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/status_or.h"
#include "daemon/metrics/counters.h"
#include "daemon/metrics/limit_reporter.h"
#include "daemon/node/node_model.h"
#include "daemon/peer/peer_connection.h"
#include "daemon/peer/peer_directory.h"
#include "daemon/peer/peer_metrics.h"
#include "daemon/peer/peer_resolver.h"
#include "daemon/peer/result_outbox.h"
#include "daemon/node/peer_service.h"
#include "daemon/node/peer_snapshot.h"
#include "protocol/features.h"
#include "session/peer_disconnect_reason.h"
#include "session/unserved_work.h"
#include "session/unbound_supply.h"

namespace kvpeer::daemon {

// The peer side's settings. kvpeerd sets every field from the option table
// (daemon/settings_mapping.h, the one mapping); the values written here are
// what a test gets without settings: the table's defaults, except that the
// limits are off (tests/daemon/settings_mapping_test.cc keeps the two alike).
struct PeerManagerConfig {
  std::string node_id;
  std::string listen_host = "0.0.0.0";
  uint16_t listen_port = 5710;
  std::optional<std::string> psk;
  session::Duration handshake_timeout = std::chrono::seconds(10);
  session::Duration load_timeout = std::chrono::seconds(30);
  session::Duration abort_ack_timeout = std::chrono::seconds(10);
  // SessionConfig::idle_timeout of every session: a connection without work
  // for this long is closed ("idle") and redialled on the next work; 0 =
  // never (docs/operations.md, "Idle peer connections").
  session::Duration idle_timeout = std::chrono::minutes(5);
  // Accepts a peer address before anything is read from it; null = any.
  std::function<bool(const boost::asio::ip::address&)> allow_address;
  // Limits (0 = none); each hit is counted as limit_<name> and logged.
  // Peer sessions at most: beyond it a dial fails with peer_unavailable (a
  // lookup answers miss, as for any unavailable peer) and a newly
  // authenticated inbound peer gets disconnect{reason:"too many peers"}.
  size_t max_peers = 0;
  // Accepted connections not yet ready, in all and from one source address
  // (wire spec section 4, item 6); one beyond is closed before a byte is read.
  size_t max_handshaking = 64;
  size_t max_handshaking_per_source = 8;
  // A peer entry with no connection and nothing waiting is removed this
  // long after it became idle (docs/operations.md, "Every key": peer-reap-after-s).
  session::Duration reap_after = std::chrono::seconds(60);
  // ServerConfig::max_rounds of every session.
  size_t max_rounds_per_peer = 0;
  // ServerConfig::round_timeout, unsupplied_timeout (also store_timeout)
  // and max_round_key_bytes of every session (wire-protocol.md section 6).
  session::Duration round_timeout = std::chrono::seconds(30);
  session::Duration unbound_timeout = std::chrono::seconds(60);
  uint64_t max_round_key_bytes = 64ull * 1024 * 1024;
  // Wire features offered in every connect (wire-protocol.md section 7).
  std::vector<std::string> features = protocol::SupportedFeatures();
  // Distinct probes of one request's open lookup round on one peer; beyond
  // it Lookup answers bad_request.
  size_t max_pending_lookups = 0;
  // PeerConnection::set_max_queued_bytes of every connection.
  uint64_t max_queued_bytes = 0;
  // TLS for every peer connection (MakeTlsContext); null = plain TCP.
  std::shared_ptr<boost::asio::ssl::context> tls;
};

// What every peer session this node opens is made with: the node's
// settings and model, and this process's epoch. Pure, so that each setting
// carried into the sessions can be checked without a connection.
session::SessionConfig PeerSessionConfig(const PeerManagerConfig& config, const ModelSettings& model,
                                         const std::string& epoch);

class PeerManager : public PeerService, private ConnectionListener {
 public:
  PeerManager(boost::asio::io_context& io, PeerManagerConfig config, NodeModel& model, session::PublishedBlocks& index,
              ResultSink& results);
  ~PeerManager() override;

  // Binds the listener; returns the bound port (useful with port 0), or
  // why the address cannot be bound.
  StatusOr<uint16_t> Listen();
  std::string listen_address() const;
  // The node id is known only once the listener is bound (port 0).
  // REQUIRES: no session exists yet.
  void set_node_id(std::string node_id) {
    config_.node_id = node_id;
    directory_.set_local_id(std::move(node_id));
  }
  // Where limit hits and authentication failures are counted (the node's
  // status.counters); null = not counted. Must outlive the manager.
  void set_counters(Counters* counters) {
    counters_ = counters;
    metrics_.set_counters(counters);
  }
  // Peer connections made from now on use TLS with this context.
  void set_tls(std::shared_ptr<boost::asio::ssl::context> tls) { config_.tls = std::move(tls); }
  // Live settings (SIGHUP): they apply to connections made from now on;
  // sessions already open keep what they were made with.
  void set_psk(std::optional<std::string> psk) { config_.psk = std::move(psk); }
  void set_idle_timeout(session::Duration idle_timeout) { config_.idle_timeout = idle_timeout; }
  void set_allow_address(std::function<bool(const boost::asio::ip::address&)> allow) {
    config_.allow_address = std::move(allow);
  }

  // Ends every session: all work fails with `reason`; stops listening.
  void Shutdown(const std::string& reason);

  // PeerService
  Status Lookup(const std::string& peer, const std::string& kv_request_id, const std::vector<protocol::Key>& keys,
                bool flush, std::vector<session::ProbeAnswer>* answers) override;
  size_t FlushLookups() override;
  Status Load(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
              std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> slots,
              session::SlotSinkRef sink) override;
  void Store(session::JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
             std::vector<session::PinRef> blocks) override;
  void Finish(const std::string& kv_request_id, const std::vector<std::string>& client_peers, bool producer) override;
  void Connect(const std::string& peer, std::function<void(Status)> done) override;
  Status Disconnect(const std::string& peer) override;
  std::vector<PeerSnapshot> PeerSnapshots() const override;
  void CollectMetrics(metrics::Registry& registry) const override;

  size_t LoadsInFlight() const;
  // Peer connections not ready yet: accepted ones still handshaking and
  // dialled ones still connecting or handshaking (status.handshaking).
  size_t Handshaking() const override;

 private:
  // ConnectionListener
  void OnSessionActivity(PeerConnection& connection, session::PeerSession& session) override;
  void OnConnectionClosed(PeerConnection& connection) override;
  void OnLookupAnswered(session::Duration round_trip) override;
  void OnLookupResp(PeerConnection& connection) override;
  void OnLimitHit(PeerConnection& connection, std::string_view limit, uint64_t count,
                  const std::string& detail) override;

  boost::asio::awaitable<void> AcceptLoop();
  // Logs a failed accept (at most once a second) and, when the process or
  // system is out of descriptors or memory, waits a moment: the pending
  // connection stays queued, so retrying at once would spin.
  boost::asio::awaitable<void> OnAcceptFailed(const boost::system::error_code& ec);
  void OnAccepted(boost::asio::ip::tcp::socket socket);
  // The handshaking bounds: true when one more accepted connection from
  // `source` may start its handshake; otherwise counts and logs the refusal.
  bool AdmitHandshake(const std::string& source);
  // Removes `connection` from handshaking_; false if it was not there.
  bool ForgetHandshaking(const std::shared_ptr<PeerConnection>& connection);
  // Removes peer entries idle for reap_after; re-arms reap_timer_.
  void ReapIdlePeers();
  void ScheduleReap();
  // The peer's current connection (live or just closed), or null.
  PeerConnection* Current(const std::string& peer) const;
  // The peer's session (never null), dialling when there is none; a failed
  // Status while the peer backs off, at the peer limit, or the node is not
  // configured (kUnavailable), shutting down or the name is not HOST:PORT.
  StatusOr<PeerConnection*> SessionFor(const std::string& peer);
  void Dial(const std::string& peer, ConnectionId id);
  // Load, for the engine (`resubmitted` nullopt: the load starts now, with
  // the full load timeout) or for work a superseded session handed back
  // (`resubmitted`: what is left of the load's timeout, ResubmitTimeout).
  Status SubmitLoad(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                    std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> slots, session::SlotSinkRef sink,
                    std::optional<session::Duration> resubmitted);
  // An accepted connection just became ready: the directory applies the
  // duplicate and restart rules (wire spec section 1); this makes it the
  // peer's connection, or closes it.
  void AdoptInbound(PeerConnection& connection);
  // The directory has made the new connection the peer's; `old` closes for
  // `cause` now.
  void Supersede(const std::string& peer, ConnectionId old, session::CloseCause cause,
                 session::PeerDisconnectReason reason);
  // What an ended connection carried goes into its entry's history.
  void AccountEnded(const std::string& peer, const PeerConnection& connection);
  // Work a superseded session handed back is asked of the peer again, once
  // the event that closed it is over (docs/wire-protocol.md, section 9,
  // "(f) Work on a superseded connection").
  void ResubmitQueued();
  void ResubmitLoad(const std::string& peer, session::UnservedLoad load, const std::string& reason);
  void FinishResubmissions(const std::string& peer, const std::string& kv_request_id);
  // Every load result leaves through here (metrics, then the engine).
  void ReportLoadResult(const std::string& peer, const session::JobResult& result);
  // Applies the connection limits to a new connection.
  void ApplyConnectionLimits(PeerConnection& connection) const;
  // `socket` as plain TCP or wrapped for TLS (config_.tls).
  PeerStream MakeStream(boost::asio::ip::tcp::socket socket) const;
  void DeliverResults(PeerConnection& connection, session::PeerSession& session);
  // Hands results_ to the engine side (posted by results_'s wake, and at
  // shutdown).
  void DrainResults();
  void ScheduleDrain();
  void BindSupply(session::PeerSession& session, const std::string& kv_request_id);
  // The session no longer serves the request: its binding goes.
  void UnbindEndedSupply(PeerConnection& connection, const std::string& kv_request_id);
  void SweepUnboundSupply();
  void CountRoundEvents(PeerConnection& connection, const session::RoundEvents& events);
  session::SessionConfig MakeSessionConfig() const;

  boost::asio::io_context& io_;
  PeerManagerConfig config_;
  NodeModel& model_;
  session::PublishedBlocks& index_;
  // The engine side (EngineRegistry); reached only by draining results_.
  ResultSink& sink_;
  // Everything owed to the engine side waits here until DrainResults, one
  // posted drain per loop turn: no result reaches an engine while its op
  // is still inside this manager (result_outbox.h).
  ResultOutbox results_;
  // Expires with the manager: a drain posted before its end does nothing.
  std::shared_ptr<char> alive_ = std::make_shared<char>();
  std::string epoch_;
  boost::asio::ip::tcp::acceptor acceptor_;
  // Looks up dialled peers' hosts, off the event loop and apart from each
  // other: one slow name stalls no other dial (daemon/peer/peer_resolver.h).
  PeerResolver resolver_;
  // Every decision about peers: entries, arbitration, backoff, reaping,
  // supply bindings, hand-back (daemon/peer/peer_directory.h).
  PeerDirectory directory_;
  // The connections the directory placed in peer entries, by its ids.
  std::map<ConnectionId, std::shared_ptr<PeerConnection>> connections_;
  // Accepted connections not ready yet, with their source address; and
  // how many there are per source address (no zero entries).
  std::map<std::shared_ptr<PeerConnection>, std::string> handshaking_;
  std::map<std::string, size_t> handshaking_per_source_;
  boost::asio::steady_timer reap_timer_;
  std::chrono::steady_clock::time_point accept_failure_logged_{};
  uint64_t accept_failures_unlogged_ = 0;
  session::UnboundSupply unbound_supply_;
  boost::asio::steady_timer supply_timer_;
  bool shutting_down_ = false;
  Counters* counters_ = nullptr;
  LimitReporter limits_;
  // Node-wide counts, histograms and the close and load log lines
  // (per-peer counts live in PeerEntry::counters).
  PeerMetrics metrics_;
};

}  // namespace kvpeer::daemon
