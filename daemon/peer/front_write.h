// FrontWriteAllowed: whether PeerWriter's synchronous front end
// (PeerWriter::WriteFrontNow, daemon/peer/peer_writer.h) may write the
// front of the write queue now, instead of leaving it to the writer
// coroutine. Pure, so the rule is tested with plain calls.
//
// Thread-safety: a pure function.
#pragma once

#include "daemon/peer/peer_phase.h"
#include "daemon/peer/write_queue.h"

namespace kvpeer::daemon {

// Only while running (not before the handshake, not once the session is
// over: the last words have their own path), only plain TCP (a TLS record
// the socket took part of would be lost by a write that does not wait),
// only between the coroutine's frames (`write_in_progress` false: a write
// beside one in flight would splice frames), and only a control frame at
// the front (a data frame needs the coroutine's torn-source handling).
bool FrontWriteAllowed(PeerPhase phase, bool zero_copy, bool write_in_progress, const WriteQueue& queue);

}  // namespace kvpeer::daemon
