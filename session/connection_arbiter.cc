#include "session/connection_arbiter.h"

namespace kvpeer::session {

namespace {

// Two connections of one peer incarnation dialled in opposite directions:
// both nodes must keep the same one without talking, so the rule depends
// only on the two node ids (spec section 1): the smaller node's dial
// survives.
Arbitration CrossDial(const std::string& local_id, const std::string& peer_id, const ConnectionFacts& existing) {
  const bool keep_locally_dialled = local_id < peer_id;
  const bool existing_survives = existing.dialled_locally == keep_locally_dialled;
  return existing_survives ? Arbitration::kCloseNewDuplicate : Arbitration::kCloseOldDuplicate;
}

}  // namespace

// Called when `incoming` becomes ready. Cases, in order:
// * local_id == peer_id: a node that dialled itself; the "two" connections
//   are the two ends of one TCP connection, so closing either kills both.
// * the epochs differ (existing's is known): `existing` belongs to the
//   peer's earlier incarnation; the peer restarted and the authenticated
//   newcomer replaces it, whether or not `existing` was ready.
// * dialled in opposite directions, same or unknown epoch: the node-id rule
//   (CrossDial), whether or not `existing` is ready here. "Ready" is a
//   per-end fact reached at different moments on the two nodes, so a rule
//   that looked at it could make A keep one connection and B the other and
//   both close the survivor of the other; the node-id rule converges.
//   When the two nodes really dialled at once this is section 1's rule for
//   "neither ready"; otherwise the smaller node dialled only because it had
//   given up on `existing`, or the larger node's new dial is refused as a
//   duplicate, as section 1 says for a ready `existing`.
// * dialled in the same direction, `existing` ready: the newcomer is a
//   duplicate (section 1).
// * dialled in the same direction, `existing` not ready: a node dials a
//   peer again only after giving up on its previous attempt, so the older
//   connection is the abandoned one and the newer survives.
Arbitration ArbitrateConnections(const std::string& local_id, const std::string& peer_id,
                                 const ConnectionFacts& existing, const ConnectionFacts& incoming) {
  if (local_id == peer_id) return Arbitration::kKeepBoth;
  if (!existing.peer_epoch.empty() && existing.peer_epoch != incoming.peer_epoch) return Arbitration::kReplaceOld;
  if (existing.dialled_locally != incoming.dialled_locally) return CrossDial(local_id, peer_id, existing);
  return existing.ready ? Arbitration::kCloseNewDuplicate : Arbitration::kCloseOldDuplicate;
}

}  // namespace kvpeer::session
