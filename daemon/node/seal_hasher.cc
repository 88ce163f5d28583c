#include "daemon/node/seal_hasher.h"

#include <chrono>
#include <optional>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "daemon/node/guarded_read.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;
using protocol::SlotIndex;

// The hand-over from the worker back to the caller's executor. Only the
// caller's executor touches it (the worker moves its reference along).
struct Handover {
  explicit Handover(asio::any_io_executor executor) : timer(std::move(executor)) {}
  asio::steady_timer timer;
  std::optional<SlotSeals> result;
};

SlotSeals HashSlots(const ShmRegion& region, const std::vector<SlotIndex>& slots, const std::atomic<bool>& stopping) {
  SlotSeals seals;
  seals.reserve(slots.size());
  for (SlotIndex slot : slots) {
    std::optional<uint64_t> seal;
    if (!stopping.load(std::memory_order_relaxed) && region.StillBacked()) seal = GuardedChecksum(region.Block(slot));
    seals.emplace(slot, seal);
  }
  return seals;
}

}  // namespace

SealHasher::SealHasher() = default;

SealHasher::~SealHasher() {
  stopping_->store(true);
  pool_.join();
}

asio::awaitable<SlotSeals> SealHasher::Hash(std::shared_ptr<ShmRegion> region, std::vector<SlotIndex> slots) {
  asio::any_io_executor home = co_await asio::this_coro::executor;
  auto handover = std::make_shared<Handover>(home);
  // The worker holds the region and the hand-over only to pass them back:
  // both are released on `home`, never on the worker.
  asio::post(pool_, [home, handover, region = std::move(region), slots = std::move(slots),
                     stopping = stopping_]() mutable {
    SlotSeals seals = HashSlots(*region, slots, *stopping);
    asio::post(home, [handover = std::move(handover), region = std::move(region), seals = std::move(seals)]() mutable {
      handover->result = std::move(seals);
      handover->timer.cancel();
    });
  });
  handover->timer.expires_at(asio::steady_timer::time_point::max());
  while (!handover->result) {
    boost::system::error_code ec;  // operation_aborted: the result is in
    co_await handover->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) break;  // cannot happen with a deadline of max()
  }
  co_return handover->result ? std::move(*handover->result) : SlotSeals{};
}

}  // namespace kvpeer::daemon
