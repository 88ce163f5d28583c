#include "session/connection_arbiter.h"

namespace kvpeer::session {

namespace {

// Two handshaking connections dialled in opposite directions: both nodes
// must pick the same one without talking, so the rule depends only on the
// two node ids (spec section 1): the smaller node's dial survives.
Arbitration CrossDial(const std::string& local_id, const std::string& peer_id, const ConnectionFacts& existing) {
  const bool keep_locally_dialled = local_id < peer_id;
  const bool existing_survives = existing.dialled_locally == keep_locally_dialled;
  return existing_survives ? Arbitration::kCloseNewDuplicate : Arbitration::kCloseOldDuplicate;
}

}  // namespace

// Cases, in order:
// * local_id == peer_id: a node that dialled itself; the "two" connections
//   are the two ends of one TCP connection, so closing either kills both.
// * existing is ready: same epoch, the new one is a duplicate; different
//   epoch, the peer restarted and the new one replaces the old.
// * existing still handshaking but its peer epoch is known and differs from
//   incoming's: `existing` belongs to the peer's earlier incarnation and can
//   never complete. Spec section 1 states the restart rule for a ready
//   `existing`; it holds just as well here, where the node-id rule could
//   close the only connection that can live.
// * neither is ready (incoming never is at arbitration time), dialled in
//   opposite directions: the node-id rule (CrossDial).
// * neither is ready, dialled in the same direction, same or unknown epoch:
//   a node dials a peer again only after giving up on its previous attempt,
//   so the older connection is the abandoned one and the newer survives.
Arbitration ArbitrateConnections(const std::string& local_id, const std::string& peer_id,
                                 const ConnectionFacts& existing, const ConnectionFacts& incoming) {
  if (local_id == peer_id) return Arbitration::kKeepBoth;
  if (existing.ready)
    return existing.peer_epoch == incoming.peer_epoch ? Arbitration::kCloseNewDuplicate : Arbitration::kReplaceOld;
  if (!existing.peer_epoch.empty() && existing.peer_epoch != incoming.peer_epoch) return Arbitration::kReplaceOld;
  if (existing.dialled_locally != incoming.dialled_locally) return CrossDial(local_id, peer_id, existing);
  return Arbitration::kCloseOldDuplicate;
}

}  // namespace kvpeer::session
