// ParseDisconnectReason: exact match against the fixed reasons, nothing else.
#include "session/peer_disconnect_reason.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>

namespace kvpeer::session {
namespace {

PeerDisconnectReason Parse(std::optional<std::string> reason) { return ParseDisconnectReason(reason); }

TEST_CASE("the fixed disconnect reasons map to their values", "[session][cause]") {
  CHECK(Parse("authentication failed") == PeerDisconnectReason::kAuthenticationFailed);
  CHECK(Parse("duplicate") == PeerDisconnectReason::kDuplicate);
  CHECK(Parse("node not configured") == PeerDisconnectReason::kNodeNotConfigured);
  CHECK(Parse("shutting down") == PeerDisconnectReason::kShuttingDown);
  CHECK(Parse("kvpeerd is shutting down") == PeerDisconnectReason::kShuttingDown);
  CHECK(Parse("too many peers") == PeerDisconnectReason::kTooManyPeers);
  CHECK(Parse("peer restarted") == PeerDisconnectReason::kPeerRestarted);
  CHECK(Parse("disconnected by operator") == PeerDisconnectReason::kDisconnectedByOperator);
  CHECK(Parse("handshake timed out") == PeerDisconnectReason::kHandshakeTimedOut);
  CHECK(Parse("idle") == PeerDisconnectReason::kIdle);
  CHECK(Parse(std::nullopt) == PeerDisconnectReason::kUnspecified);
  CHECK(Parse("") == PeerDisconnectReason::kUnspecified);
}

TEST_CASE("any other disconnect text is unspecified", "[session][cause][attack]") {
  CHECK(Parse("x authentication failed y") == PeerDisconnectReason::kUnspecified);
  CHECK(Parse("authentication failed ") == PeerDisconnectReason::kUnspecified);
  CHECK(Parse("AUTHENTICATION FAILED") == PeerDisconnectReason::kUnspecified);
  CHECK(Parse(std::string("duplicate\0", 10)) == PeerDisconnectReason::kUnspecified);
  CHECK(Parse("peer silent config_fingerprint mismatch") == PeerDisconnectReason::kUnspecified);
  CHECK(Parse("peer silent for 10 s") == PeerDisconnectReason::kUnspecified);
}

TEST_CASE("the text sent for a fixed reason parses back to it", "[session][cause]") {
  for (PeerDisconnectReason reason : {PeerDisconnectReason::kAuthenticationFailed, PeerDisconnectReason::kDuplicate,
                                      PeerDisconnectReason::kNodeNotConfigured, PeerDisconnectReason::kShuttingDown,
                                      PeerDisconnectReason::kTooManyPeers, PeerDisconnectReason::kPeerRestarted,
                                      PeerDisconnectReason::kDisconnectedByOperator,
                                      PeerDisconnectReason::kHandshakeTimedOut, PeerDisconnectReason::kIdle}) {
    CHECK(Parse(std::string(DisconnectReasonText(reason))) == reason);
  }
  CHECK(DisconnectReasonText(PeerDisconnectReason::kUnspecified).empty());
}

}  // namespace
}  // namespace kvpeer::session
