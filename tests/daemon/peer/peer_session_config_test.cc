// PeerSessionConfig: the settings every peer session is made with.
#include <catch2/catch.hpp>

#include "daemon/peer/peer_manager.h"

namespace kvpeer::daemon {
namespace {

TEST_CASE("peer session config: the idle timeout reaches every session (pins 977a57d)", "[peer][directory]") {
  // 977a57d's change to PeerManager: --idle-peer-timeout-s reached no
  // session until MakeSessionConfig carried it, so no connection was ever
  // closed as idle.
  PeerManagerConfig config;
  config.node_id = "node-b:5710";
  config.idle_timeout = std::chrono::seconds(7);
  config.load_timeout = std::chrono::seconds(11);
  config.unbound_timeout = std::chrono::seconds(13);
  const session::SessionConfig session = PeerSessionConfig(config, ModelSettings{4096, "fp", "seed"}, "epoch-1");
  CHECK(session.idle_timeout == std::chrono::seconds(7));
  CHECK(session.client.load_timeout == std::chrono::seconds(11));
  CHECK(session.server.unsupplied_timeout == std::chrono::seconds(13));
  CHECK(session.server.store_timeout == std::chrono::seconds(13));
  CHECK(session.local_id == "node-b:5710");
  CHECK(session.epoch == "epoch-1");
  CHECK(session.block_len == 4096);
  CHECK(session.server.block_len == 4096);
}

TEST_CASE("peer session config: idle timeout 0 means never", "[peer][directory]") {
  PeerManagerConfig config;
  config.idle_timeout = session::Duration(0);
  CHECK(PeerSessionConfig(config, ModelSettings{4096, "fp", "seed"}, "e").idle_timeout == session::Duration(0));
}

}  // namespace
}  // namespace kvpeer::daemon
