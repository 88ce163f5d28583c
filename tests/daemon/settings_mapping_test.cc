// daemon/settings_mapping.h: the one place settings become the peer side's
// configuration. PeerManagerConfig keeps in-struct values so that tests can
// build a peer manager without settings; the daemon sets every field from
// the option table (config/option_table.cc). These cases keep the two from
// drifting apart and show that every mapped field is carried.
#include "daemon/settings_mapping.h"

#include <catch2/catch.hpp>

#include "config/settings.h"
#include "daemon/peer/peer_manager.h"

namespace kvpeer::daemon {
namespace {

TEST_CASE("settings mapping: the peer side's in-struct values are the option table's defaults") {
  const config::Settings defaults;
  const PeerManagerConfig mapped = MakePeerConfig(defaults);
  const PeerManagerConfig bare;
  CHECK(mapped.listen_port == bare.listen_port);
  CHECK(mapped.handshake_timeout == bare.handshake_timeout);
  CHECK(mapped.load_timeout == bare.load_timeout);
  CHECK(mapped.abort_ack_timeout == bare.abort_ack_timeout);
  CHECK(mapped.idle_timeout == bare.idle_timeout);
  CHECK(mapped.reap_after == bare.reap_after);
  CHECK(mapped.round_timeout == bare.round_timeout);
  CHECK(mapped.unbound_timeout == bare.unbound_timeout);
  CHECK(mapped.max_round_key_bytes == bare.max_round_key_bytes);
  CHECK(mapped.max_handshaking == bare.max_handshaking);
  CHECK(mapped.max_handshaking_per_source == bare.max_handshaking_per_source);
  CHECK(mapped.features == bare.features);
}

TEST_CASE("settings mapping: every peer setting is carried, and unset ones stay unset") {
  config::Settings settings;
  settings.max_peers = 3;
  settings.max_rounds_per_peer = 5;
  settings.max_pending_lookups = 7;
  settings.max_queued_bytes = 11;
  settings.load_timeout = std::chrono::seconds(13);
  const PeerManagerConfig mapped = MakePeerConfig(settings);
  CHECK(mapped.max_peers == 3);
  CHECK(mapped.max_rounds_per_peer == 5);
  CHECK(mapped.max_pending_lookups == 7);
  CHECK(mapped.max_queued_bytes == 11);
  CHECK(mapped.load_timeout == std::chrono::seconds(13));
  CHECK(MakePsk(settings) == std::nullopt);
  CHECK(MakeAllowAddress(settings) == nullptr);
}

}  // namespace
}  // namespace kvpeer::daemon
