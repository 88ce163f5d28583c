#include "daemon/peer/front_write.h"

namespace kvpeer::daemon {

bool FrontWriteAllowed(PeerPhase phase, bool zero_copy, bool write_in_progress, const WriteQueue& queue) {
  return phase == PeerPhase::kRunning && zero_copy && !write_in_progress && !queue.empty() && !queue.front_is_data();
}

}  // namespace kvpeer::daemon
