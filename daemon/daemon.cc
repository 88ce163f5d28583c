#include "daemon/daemon.h"

#include <spdlog/spdlog.h>

#include <functional>
#include <optional>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "config/cidr.h"
#include "daemon/block_index.h"
#include "daemon/control_server.h"
#include "daemon/engine_registry.h"
#include "daemon/node_model.h"
#include "daemon/peer_manager.h"
#include "daemon/systemd_notify.h"

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

// The one-line state systemd shows (`systemctl status`).
std::string StatusText(const std::string& node_id, const PeerManager& peers, const EngineRegistry& engines) {
  size_t ready = 0;
  for (const boost::json::value& peer : peers.PeersStatus()) {
    if (peer.as_object().at("state") == "ready") ++ready;
  }
  return fmt::format("node {}, {} peers ready, {} engines", node_id, ready, engines.engine_count());
}

// Sends WATCHDOG=1 (with a fresh status) every `period` for as long as the
// event loop turns, so a stuck loop lets systemd's watchdog fire.
boost::asio::awaitable<void> FeedWatchdog(boost::asio::steady_timer& timer, std::chrono::microseconds period,
                                          std::function<std::string()> status) {
  for (;;) {
    timer.expires_after(period);
    boost::system::error_code ec;
    co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    if (ec) co_return;
    systemd::Watchdog(status());
  }
}

}  // namespace

struct Daemon::Parts {
  Parts(boost::asio::io_context& io, const config::Settings& settings)
      : model(settings.block_len, settings.config_fingerprint, settings.hash_seed),
        engines(io.get_executor(), model, index, settings.node_id),
        peers(io, MakePeerConfig(settings), model, index, engines),
        signals(io, SIGTERM, SIGINT),
        drain_timer(io),
        watchdog_timer(io) {
    engines.set_peer_service(&peers);
  }

  NodeModel model;
  NodeBlockIndex index;
  EngineRegistry engines;
  PeerManager peers;
  std::unique_ptr<ControlServer> control;
  boost::asio::signal_set signals;
  boost::asio::steady_timer drain_timer;
  boost::asio::steady_timer watchdog_timer;
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
  parts_->engines.set_node_id(settings_.node_id);

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

  bool draining = false;  // from the signal on, systemd's STATUS says so
  parts_->signals.async_wait([this, &draining](boost::system::error_code ec, int signal) {
    if (ec) return;
    spdlog::info("received signal {}: draining", signal);
    draining = true;
    systemd::Stopping("draining");
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
  auto status = [this, &draining] {
    return draining ? std::string("draining") : StatusText(settings_.node_id, parts_->peers, parts_->engines);
  };
  systemd::Ready(status());
  if (std::optional<std::chrono::microseconds> timeout = systemd::WatchdogInterval()) {
    boost::asio::co_spawn(io_, FeedWatchdog(parts_->watchdog_timer, *timeout / 2, status), boost::asio::detached);
  }
  io_.run();
  spdlog::info("kvpeerd stopped");
  return 0;
}

}  // namespace kvpeer::daemon
