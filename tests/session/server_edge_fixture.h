// Shared by the server-side edge-case tests (server_role_test.cc,
// server_role_rounds_test.cc, server_role_frames_test.cc).
#pragma once

#include <catch2/catch.hpp>

#include "tests/session/server_harness.h"

namespace kvpeer::session::testing::server_test {

// One block per data frame: every block is a frame of its own.
inline ServerConfig OneBlockFrames() {
  ServerConfig config = DefaultServerConfig();
  config.max_frame_payload = kServerBlockLen;
  return config;
}

// Every request has ended: no state, no pins.
inline void RequireIdle(ServerHarness& h) {
  h.WriteFrames();
  REQUIRE(h.role->TrackedRequests() == 0);
  REQUIRE(h.role->RoundsServing() == 0);
  REQUIRE(h.region->total_live_pins() == 0);
}

}  // namespace kvpeer::session::testing::server_test
