// ConnectionStats: the traffic counters of one peer connection, for the
// metrics. Plain integers, incremented per frame by the connection; summed
// per peer (PeerCounters, peer_snapshot.h).
//
// Thread-safety: a value; used on the daemon's event loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

#include "protocol/messages.h"

namespace kvpeer::daemon {

struct ConnectionStats {
  // Indexed by the protocol::Message alternative (Unknown last).
  static constexpr size_t kMessageKinds = std::variant_size_v<protocol::Message>;
  std::array<uint64_t, kMessageKinds> frames_sent{};
  std::array<uint64_t, kMessageKinds> frames_received{};
  uint64_t lookup_keys_sent = 0;      // keys in our lookups
  uint64_t lookup_hits_received = 0;  // hits in the peer's lookup_resps
  uint64_t lookup_keys_served = 0;    // keys in the peer's lookups
  uint64_t lookup_hits_served = 0;    // hits in our lookup_resps

  ConnectionStats& operator+=(const ConnectionStats& other);
};

}  // namespace kvpeer::daemon
