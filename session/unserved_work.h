// UnservedWork: what a closing session hands back instead of failing,
// because the peer provably never served it and another connection to the
// same peer can carry it (docs/wire-protocol.md, section 9, "(f) Work on a
// superseded connection"). The daemon asks the peer again for each piece over that
// connection; each load still gets exactly one result.
//
// Thread-safety: plain values.
#pragma once

#include <string>
#include <vector>

#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::session {

// A load whose fetch nothing answered yet: no block of it landed or is
// landing, so its slots are untouched and it can be asked again whole.
struct UnservedLoad {
  JobId job_id = 0;
  std::string kv_request_id;
  std::vector<protocol::Key> keys;
  std::vector<protocol::SlotIndex> block_indexes;
  SlotSinkRef sink;
};

// Probes of one request that were never answered, of a request that holds
// no confirmed hit and no load here (so nothing of it dies with the session).
struct UnservedProbes {
  std::string kv_request_id;
  std::vector<protocol::Key> keys;
};

struct UnservedWork {
  std::vector<UnservedLoad> loads;
  std::vector<UnservedProbes> probes;
  bool empty() const { return loads.empty() && probes.empty(); }
};

}  // namespace kvpeer::session
