#include "daemon/daemon.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <functional>
#include <optional>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "daemon/node/published_blocks.h"
#include "daemon/control/control_server.h"
#include "daemon/control/engine_registry.h"
#include "daemon/metrics/metrics_http.h"
#include "daemon/node/guarded_read.h"
#include "daemon/node/node_model.h"
#include "daemon/peer/peer_manager.h"
#include "daemon/peer/peer_stream.h"
#include "daemon/settings_mapping.h"
#include "daemon/systemd_notify.h"
#include "session/peer_disconnect_reason.h"

namespace kvpeer::daemon {

namespace {

// How long SIGTERM waits for engines to collect the results of the drain
// before the control socket closes anyway.
constexpr auto kDrainGrace = std::chrono::milliseconds(500);

// The one-line state systemd shows (`systemctl status`).
std::string StatusText(const std::string& node_id, const PeerManager& peers, const EngineRegistry& engines) {
  size_t ready = 0;
  for (const PeerSnapshot& peer : peers.PeerSnapshots()) ready += peer.state == PeerState::kReady ? 1 : 0;
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
        reload_signal(io, SIGHUP),
        drain_timer(io),
        watchdog_timer(io) {
    engines.set_peer_service(&peers);
    engines.set_max_engines(settings.max_engines);
    engines.set_max_region_bytes(config::EffectiveMaxRegionBytes(settings));
    engines.set_engine_limits({settings.max_seal_bytes, settings.max_open_request_bytes});
    index.set_limits({static_cast<uint32_t>(settings.max_keys_per_slot), settings.max_published_key_bytes});
    index.set_counters(&engines.counters());
    peers.set_counters(&engines.counters());
  }

  NodeModel model;
  NodePublishedBlocks index;
  EngineRegistry engines;
  PeerManager peers;
  std::unique_ptr<ControlServer> control;
  std::unique_ptr<MetricsHttpServer> metrics_http;
  boost::asio::signal_set signals;
  boost::asio::signal_set reload_signal;
  boost::asio::steady_timer drain_timer;
  boost::asio::steady_timer watchdog_timer;
};

Daemon::Daemon(config::Settings settings, std::vector<std::string> argv)
    : settings_(std::move(settings)), loaded_(settings_), argv_(std::move(argv)) {}

Daemon::~Daemon() = default;

int Daemon::Run() {
  // A truncated region read while hashing must not kill the daemon, and a
  // SIGBUS sent with kill() is ignored from the start (guarded_read.h).
  InstallSigbusGuard();
  parts_ = std::make_unique<Parts>(io_, settings_);
  if (Status error = SetUpPeerTls(); !error.ok()) {
    spdlog::error("cannot set up TLS for peer connections: {}", error.message());
    return 1;
  }
  const StatusOr<uint16_t> port = parts_->peers.Listen();
  if (!port.ok()) {
    spdlog::error("cannot listen on {}:{}: {}", settings_.listen.host, settings_.listen.port, port.status().message());
    return 1;
  }
  settings_.node_id = config::ResolveNodeId(settings_, *port);
  parts_->peers.set_node_id(settings_.node_id);
  parts_->engines.set_node_id(settings_.node_id);

  ControlServerOptions options;
  options.socket_path = settings_.socket_path;
  options.node_id = settings_.node_id;
  options.listen = parts_->peers.listen_address();
  options.config = config::EffectiveConfigJson(settings_);
  options.socket_group = settings_.socket_group;
  options.allow_uids = settings_.allow_uids;
  options.allow_gids = settings_.allow_gids;
  options.access =
      AccessPolicy(static_cast<uint32_t>(::geteuid()), GrantedIds{settings_.publisher_uids, settings_.publisher_gids},
                   GrantedIds{settings_.operator_uids, settings_.operator_gids});
  options.max_connections = settings_.max_control_connections;
  parts_->control = std::make_unique<ControlServer>(io_, std::move(options), parts_->engines);
  if (Status error = parts_->control->Start(); !error.ok()) {
    spdlog::error("cannot open control socket: {}", error.message());
    return 1;
  }
  if (settings_.metrics_listen) {
    parts_->metrics_http = std::make_unique<MetricsHttpServer>(io_, *settings_.metrics_listen,
                                                               [this] { return parts_->control->MetricsText(); });
    if (Status error = parts_->metrics_http->Start(); !error.ok()) {
      spdlog::error("{}", error.message());
      return 1;
    }
  }

  WaitForTermination();
  WaitForReload();
  spdlog::info("kvpeerd ready: node_id={} listen={} socket={}", settings_.node_id, parts_->peers.listen_address(),
               settings_.socket_path);
  auto status = [this] {
    return draining_ ? std::string("draining") : StatusText(settings_.node_id, parts_->peers, parts_->engines);
  };
  systemd::Ready(status());
  if (std::optional<std::chrono::microseconds> timeout = systemd::WatchdogInterval()) {
    boost::asio::co_spawn(io_, FeedWatchdog(parts_->watchdog_timer, *timeout / 2, status), boost::asio::detached);
  }
  io_.run();
  spdlog::info("kvpeerd stopped");
  return 0;
}

Status Daemon::SetUpPeerTls() {
  if (settings_.tls_cert.empty()) return Status::Ok();
  auto tls = MakeTlsContext({settings_.tls_cert, settings_.tls_key, settings_.tls_ca});
  if (!tls.ok()) return tls.status();
  parts_->peers.set_tls(std::move(tls).value());
  spdlog::info("peer connections use TLS 1.3 with mutual certificate verification (CA {})", settings_.tls_ca);
  return Status::Ok();
}

void Daemon::WaitForTermination() {
  parts_->signals.async_wait([this](boost::system::error_code ec, int signal) {
    if (ec) return;
    spdlog::info("received signal {}: draining", signal);
    draining_ = true;
    systemd::Stopping("draining");
    boost::system::error_code ignored;
    parts_->reload_signal.cancel(ignored);
    parts_->control->BeginShutdown();
    parts_->peers.Shutdown(std::string(session::kDaemonShutdownReason));
    // Results are queued for the engines now; give their polls a moment.
    parts_->drain_timer.expires_after(kDrainGrace);
    parts_->drain_timer.async_wait([this](boost::system::error_code) {
      if (parts_->metrics_http) parts_->metrics_http->Stop();
      parts_->control->Stop();
      io_.stop();
    });
  });
}

void Daemon::WaitForReload() {
  parts_->reload_signal.async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;  // cancelled: draining
    Reload();
    WaitForReload();
  });
}

void Daemon::Reload() {
  Counters& counters = parts_->engines.counters();
  if (argv_.empty()) {
    spdlog::warn("reload: SIGHUP received but there is no command line to re-read; nothing changed");
    return;
  }
  spdlog::info("reload: SIGHUP received; re-reading {}",
               settings_.config_file.empty() ? "the command line (no --config)" : settings_.config_file);
  std::vector<const char*> args;
  for (const std::string& arg : argv_) args.push_back(arg.c_str());
  config::ParseResult parsed = config::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (!parsed.settings) {
    counters.Add(Counter::kConfigReloadFailures);
    std::string message = parsed.message;
    while (!message.empty() && message.back() == '\n') message.pop_back();
    spdlog::error("reload: the settings are invalid; nothing changed: {}", message);
    return;
  }
  counters.Add(Counter::kConfigReloads);
  const std::vector<config::SettingChange> changes = config::DiffSettings(loaded_, *parsed.settings);
  size_t applied = 0;
  for (const config::SettingChange& change : changes) {
    if (change.live) {
      ++applied;
      spdlog::info("reload: {} {} -> {}", change.name, change.old_value, change.new_value);
    } else {
      spdlog::warn("reload: {} {} -> {} needs a restart; ignored", change.name, change.old_value, change.new_value);
    }
  }
  if (applied == 0) {
    spdlog::info("reload: no live setting changed");
    return;
  }
  config::ApplyLiveSettings(*parsed.settings, &settings_);
  config::ApplyLiveSettings(*parsed.settings, &loaded_);
  ApplyLive();
}

void Daemon::ApplyLive() {
  spdlog::set_level(spdlog::level::from_str(settings_.log_level));
  parts_->peers.set_psk(MakePsk(settings_));
  parts_->peers.set_idle_timeout(settings_.idle_peer_timeout);
  parts_->peers.set_allow_address(MakeAllowAddress(settings_));
  parts_->control->set_config(config::EffectiveConfigJson(settings_));
}

}  // namespace kvpeer::daemon
