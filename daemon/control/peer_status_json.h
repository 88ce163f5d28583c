// PeersStatusJson: `status.peers` (control-api.md, `status`) rendered from
// the peer side's snapshots, one object per peer, fields in the documented
// order.
//
// Thread-safety: a pure function.
#pragma once

#include <vector>

#include <boost/json/array.hpp>

#include "daemon/node/peer_snapshot.h"

namespace kvpeer::daemon {

boost::json::array PeersStatusJson(const std::vector<PeerSnapshot>& peers);

}  // namespace kvpeer::daemon
