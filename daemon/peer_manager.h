// PeerManager: the peer side of the daemon. It listens for peer nodes,
// dials them on demand with capped exponential backoff, keeps one
// PeerConnection per peer (settling duplicates and restarts with
// ArbitrateConnections), routes engines' work to the right session, binds
// store supply to the session whose peer fetches it, and hands every result
// back through the ResultSink.
//
// Thread-safety: everything runs on the daemon's one io_context.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/node_model.h"
#include "daemon/peer_connection.h"
#include "daemon/peer_service.h"
#include "session/unbound_supply.h"

namespace kvpeer::daemon {

struct PeerManagerConfig {
  std::string node_id;
  std::string listen_host = "0.0.0.0";
  uint16_t listen_port = 5710;
  std::optional<std::string> psk;
  session::Duration handshake_timeout = std::chrono::seconds(10);
  session::Duration load_timeout = std::chrono::seconds(30);
  session::Duration abort_ack_timeout = std::chrono::seconds(10);
  // Accepts a peer address before anything is read from it; null = any.
  std::function<bool(const boost::asio::ip::address&)> allow_address;
};

class PeerManager : public PeerService, private ConnectionListener {
 public:
  PeerManager(boost::asio::io_context& io, PeerManagerConfig config, NodeModel& model, session::BlockIndex& index,
              ResultSink& results);
  ~PeerManager() override;

  // Binds the listener; returns the bound port (useful with port 0).
  // Throws boost::system::system_error when the address cannot be bound.
  uint16_t Listen();
  std::string listen_address() const;
  // The node id is known only once the listener is bound (port 0).
  // REQUIRES: no session exists yet.
  void set_node_id(std::string node_id) { config_.node_id = std::move(node_id); }

  // Ends every session: all work fails with `reason`; stops listening.
  void Shutdown(const std::string& reason);

  // PeerService
  ApiStatus Lookup(const std::string& peer, const std::string& kv_request_id, const std::vector<protocol::Key>& keys,
                   bool flush, std::vector<session::ProbeAnswer>* answers) override;
  size_t FlushLookups() override;
  ApiStatus Load(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                 std::vector<protocol::Key> keys, std::vector<protocol::BlockIndex> block_ids,
                 session::SlotSinkRef sink) override;
  void Store(session::JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
             std::vector<session::PinRef> blocks) override;
  void Finish(const std::string& kv_request_id) override;
  void Connect(const std::string& peer, std::function<void(ApiStatus)> done) override;
  ApiStatus Disconnect(const std::string& peer) override;
  boost::json::array PeersStatus() const override;

  size_t LoadsInFlight() const;

 private:
  enum class PeerState { kConnecting, kHandshaking, kReady, kBackoff, kClosed };
  struct Peer {
    PeerState state = PeerState::kClosed;
    std::chrono::system_clock::time_point since = std::chrono::system_clock::now();
    std::shared_ptr<PeerConnection> connection;
    session::Duration backoff = std::chrono::milliseconds(0);
    std::chrono::steady_clock::time_point backoff_until;
    std::optional<std::string> last_error;
    std::vector<std::function<void(ApiStatus)>> connect_waiters;
    uint64_t bytes_sent_closed = 0;      // of connections already gone
    uint64_t bytes_received_closed = 0;
  };

  // ConnectionListener
  void OnSessionActivity(PeerConnection& connection) override;
  void OnConnectionClosed(PeerConnection& connection) override;

  boost::asio::awaitable<void> AcceptLoop();
  void OnAccepted(boost::asio::ip::tcp::socket socket);
  // The peer's session, dialling when there is none. Null (with *error)
  // while the peer backs off or the node is not configured.
  PeerConnection* SessionFor(const std::string& peer, ApiStatus* error);
  void Dial(const std::string& peer, Peer& entry);
  void AdoptInbound(PeerConnection& connection);
  void SetState(Peer& entry, PeerState state);
  void DeliverResults(PeerConnection& connection);
  void BindSupply(PeerConnection& connection, const std::string& kv_request_id);
  void SweepUnboundSupply();
  session::SessionConfig MakeSessionConfig() const;

  boost::asio::io_context& io_;
  PeerManagerConfig config_;
  NodeModel& model_;
  session::BlockIndex& index_;
  ResultSink& results_;
  std::string epoch_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::map<std::string, Peer> peers_;
  // Accepted connections whose peer has not identified itself yet.
  std::set<std::shared_ptr<PeerConnection>> unidentified_;
  // kv_request_id -> peer whose session fetched it (where its supply goes).
  std::map<std::string, std::string> supply_bindings_;
  session::UnboundSupply unbound_supply_;
  boost::asio::steady_timer supply_timer_;
  bool shutting_down_ = false;
};

}  // namespace kvpeer::daemon
