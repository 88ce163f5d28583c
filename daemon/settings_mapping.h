// The one place where the option values (config::Settings) become the
// peer side's configuration: PeerManagerConfig, which PeerSessionConfig
// (daemon/peer/peer_manager.h) turns into each session's SessionConfig.
// Defaults are not repeated here: every field is set from Settings, whose
// defaults come from the option table (config/option_table.cc).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <functional>
#include <optional>
#include <string>

#include "config/settings.h"
#include "daemon/peer/peer_manager.h"

namespace kvpeer::daemon {

// The peer side's configuration: listen address, PSK, timeouts, limits,
// features and the allow-cidr check. node_id and tls are set once known.
PeerManagerConfig MakePeerConfig(const config::Settings& settings);

// The allow-cidr check for accepted peers; null when any address may connect.
std::function<bool(const boost::asio::ip::address&)> MakeAllowAddress(const config::Settings& settings);

// The key peers authenticate with; nullopt when no psk-file is set.
std::optional<std::string> MakePsk(const config::Settings& settings);

}  // namespace kvpeer::daemon
