// The epoch of this run of the node (wire spec, "Handshake"): random and
// never all zeros, so that peers can tell a restart from a reconnection.
//
// Thread-safety: may be called from any thread.
#pragma once

#include <string>

namespace kvpeer::daemon {

// A fresh epoch from OpenSSL's CSPRNG (base/random_token.h). Aborts, after
// logging why, if the CSPRNG fails: the node cannot take part in the wire
// without an epoch, and a fixed one would hide its restarts from peers.
std::string RandomEpoch();

}  // namespace kvpeer::daemon
