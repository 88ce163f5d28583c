// The duplicate-connection and restart rules of wire-protocol.md section 1,
// as a pure decision over two connections to the same peer node, applied
// when the newer one is authenticated (section 4, item 6: nothing a
// connection says before that changes anything outside it).
#pragma once

#include <string>

namespace kvpeer::session {

struct ConnectionFacts {
  bool ready = false;            // the handshake completed (authenticated)
  bool dialled_locally = false;  // we dialled it (otherwise we accepted it)
  std::string peer_epoch;        // the epoch in the peer's connect; empty = not received yet
};

enum class Arbitration {
  kKeepBoth,           // not the same peer after all (should not happen; defensive)
  kCloseNewDuplicate,  // close the new connection with disconnect{reason:"duplicate"}
  kCloseOldDuplicate,  // close the existing connection with disconnect{reason:"duplicate"}
  kReplaceOld,         // the peer restarted: close the old session, keep the new one
};

// Decides which of `existing` and `incoming` (both to `peer_id`; `incoming`
// has just become ready, so its epoch is known) survives.
Arbitration ArbitrateConnections(const std::string& local_id, const std::string& peer_id,
                                 const ConnectionFacts& existing, const ConnectionFacts& incoming);

}  // namespace kvpeer::session
