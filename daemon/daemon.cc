#include "daemon/daemon.h"

#include <spdlog/spdlog.h>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "config/cidr.h"
#include "daemon/block_index.h"
#include "daemon/control_server.h"
#include "daemon/engine_registry.h"
#include "daemon/node_model.h"
#include "daemon/peer_manager.h"

namespace kvpeer::daemon {

namespace {

// How long SIGTERM waits for engines to collect the results of the drain
// before the control socket closes anyway.
constexpr auto kDrainGrace = std::chrono::milliseconds(500);

PeerManagerConfig MakePeerConfig(const config::Settings& settings) {
  PeerManagerConfig peers;
  peers.listen_host = settings.listen.host;
  peers.listen_port = settings.listen.port;
  if (!settings.psk.empty()) peers.psk = settings.psk;
  peers.handshake_timeout = settings.handshake_timeout;
  peers.load_timeout = settings.load_timeout;
  peers.abort_ack_timeout = settings.abort_ack_timeout;
  if (!settings.allow_cidrs.empty()) {
    auto allowlist = settings.allow_cidrs;
    peers.allow_address = [allowlist](const boost::asio::ip::address& address) {
      auto ip = config::IpAddress::Parse(address.to_string());
      return ip && config::AllowlistPermits(allowlist, *ip);
    };
  }
  return peers;
}

}  // namespace

struct Daemon::Parts {
  Parts(boost::asio::io_context& io, const config::Settings& settings)
      : model(settings.block_len, settings.config_fingerprint, settings.hash_seed),
        engines(io.get_executor(), model, index, settings.node_id),
        peers(io, MakePeerConfig(settings), model, index, engines),
        signals(io, SIGTERM, SIGINT),
        drain_timer(io) {
    engines.set_peer_service(&peers);
  }

  NodeModel model;
  NodeBlockIndex index;
  EngineRegistry engines;
  PeerManager peers;
  std::unique_ptr<ControlServer> control;
  boost::asio::signal_set signals;
  boost::asio::steady_timer drain_timer;
};

Daemon::Daemon(config::Settings settings) : settings_(std::move(settings)) {}

Daemon::~Daemon() = default;

int Daemon::Run() {
  parts_ = std::make_unique<Parts>(io_, settings_);
  uint16_t port = 0;
  try {
    port = parts_->peers.Listen();
  } catch (const boost::system::system_error& error) {
    spdlog::error("cannot listen on {}:{}: {}", settings_.listen.host, settings_.listen.port, error.what());
    return 1;
  }
  settings_.node_id = config::ResolveNodeId(settings_, port);
  parts_->peers.set_node_id(settings_.node_id);

  ControlServerOptions options;
  options.socket_path = settings_.socket_path;
  options.node_id = settings_.node_id;
  options.listen = parts_->peers.listen_address();
  options.config = config::EffectiveConfigJson(settings_);
  parts_->control = std::make_unique<ControlServer>(io_, std::move(options), parts_->engines);
  if (ApiStatus error = parts_->control->Start()) {
    spdlog::error("cannot open control socket: {}", error->message);
    return 1;
  }

  parts_->signals.async_wait([this](boost::system::error_code ec, int signal) {
    if (ec) return;
    spdlog::info("received signal {}: draining", signal);
    parts_->control->BeginShutdown();
    parts_->peers.Shutdown("kvpeerd is shutting down");
    // Results are queued for the engines now; give their polls a moment.
    parts_->drain_timer.expires_after(kDrainGrace);
    parts_->drain_timer.async_wait([this](boost::system::error_code) {
      parts_->control->Stop();
      io_.stop();
    });
  });

  spdlog::info("kvpeerd ready: node_id={} listen={} socket={}", settings_.node_id, parts_->peers.listen_address(),
               settings_.socket_path);
  io_.run();
  spdlog::info("kvpeerd stopped");
  return 0;
}

}  // namespace kvpeer::daemon
