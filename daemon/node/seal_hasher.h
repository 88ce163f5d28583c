// SealHasher: hashes engine slots for sealed publishes and stores off the
// event loop (docs/security.md, "One request may not hold the event loop").
//
// `seal: true` makes the daemon take each named slot's XXH3-64 now
// (control-api.md `publish`). A request may name gigabytes of slots, and a
// cold mapping costs ~12 µs a page on some machines, so hashing on the
// event loop stalled peers, status and the watchdog for tens of seconds.
// Here each distinct slot is hashed once, on one worker thread, and the
// caller's coroutine resumes on its own executor with the result; the loop
// keeps serving meanwhile. The worker reads under the SIGBUS guard
// (guarded_read.h): a region truncated meanwhile yields nullopt for the
// slots it no longer covers.
//
// Thread-safety: Hash() is called from the event loop; the region it is
// given is only read on the worker and is released on the caller's
// executor. Destruction stops the worker after the slot it is hashing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "daemon/node/published_blocks.h"
#include "daemon/node/shm_region.h"

namespace kvpeer::daemon {

class SealHasher {
 public:
  SealHasher();
  ~SealHasher();
  SealHasher(const SealHasher&) = delete;
  SealHasher& operator=(const SealHasher&) = delete;

  // The seal of each of `slots` (distinct, each below the region's
  // num_blocks). Resumes on the calling coroutine's executor. A hasher
  // being destroyed leaves the slots not yet hashed at nullopt.
  boost::asio::awaitable<SlotSeals> Hash(std::shared_ptr<ShmRegion> region, std::vector<protocol::SlotIndex> slots);

 private:
  boost::asio::thread_pool pool_{1};
  std::shared_ptr<std::atomic<bool>> stopping_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace kvpeer::daemon
