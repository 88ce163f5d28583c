#include "daemon/node/connection_stats.h"

namespace kvpeer::daemon {

ConnectionStats& ConnectionStats::operator+=(const ConnectionStats& other) {
  for (size_t i = 0; i < kMessageKinds; ++i) {
    frames_sent[i] += other.frames_sent[i];
    frames_received[i] += other.frames_received[i];
  }
  lookup_keys_sent += other.lookup_keys_sent;
  lookup_hits_received += other.lookup_hits_received;
  lookup_keys_served += other.lookup_keys_served;
  lookup_hits_served += other.lookup_hits_served;
  return *this;
}

}  // namespace kvpeer::daemon
