#include "daemon/settings_mapping.h"

#include "config/cidr.h"

namespace kvpeer::daemon {

std::function<bool(const boost::asio::ip::address&)> MakeAllowAddress(const config::Settings& settings) {
  if (settings.allow_cidrs.empty()) return nullptr;
  auto allowlist = settings.allow_cidrs;
  return [allowlist](const boost::asio::ip::address& address) {
    auto ip = config::IpAddress::Parse(address.to_string());
    return ip && config::AllowlistPermits(allowlist, *ip);
  };
}

std::optional<std::string> MakePsk(const config::Settings& settings) {
  if (settings.psk.empty()) return std::nullopt;
  return settings.psk;
}

PeerManagerConfig MakePeerConfig(const config::Settings& settings) {
  PeerManagerConfig peers;
  peers.listen_host = settings.listen.host;
  peers.listen_port = settings.listen.port;
  peers.psk = MakePsk(settings);
  peers.handshake_timeout = settings.handshake_timeout;
  peers.idle_timeout = settings.idle_peer_timeout;
  peers.load_timeout = settings.load_timeout;
  peers.abort_ack_timeout = settings.abort_ack_timeout;
  peers.max_peers = settings.max_peers;
  peers.max_rounds_per_peer = settings.max_rounds_per_peer;
  peers.round_timeout = settings.round_timeout;
  peers.unbound_timeout = settings.unbound_timeout;
  peers.max_round_key_bytes = settings.max_round_key_bytes;
  peers.features = settings.features;
  peers.max_pending_lookups = settings.max_pending_lookups;
  peers.max_queued_bytes = settings.max_queued_bytes;
  peers.allow_address = MakeAllowAddress(settings);
  peers.max_handshaking = settings.max_handshaking;
  peers.max_handshaking_per_source = settings.max_handshaking_per_source;
  peers.reap_after = settings.peer_reap_after;
  return peers;
}

}  // namespace kvpeer::daemon
