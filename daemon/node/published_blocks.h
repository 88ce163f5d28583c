// NodePublishedBlocks: the node-wide index of published keys over every local
// engine's region, and the pins that keep source blocks stable.
//
// A key may be held by several engines of the node, each at one of its own
// slots (docs/control-api.md, "`publish` and `unpublish`"): a peer's lookup hits
// while any engine holds it and any holder may serve it; each engine's
// unpublish or exit withdraws only its own holding; an engine publishing a
// key it already holds at another slot moves its own holding. No engine's
// request touches another engine's holding, so no engine is ever told a
// slot is free because of another engine. The server role answers peers'
// lookups from here without involving any engine.
//
// Slot lifecycle. A slot is "in use" while a key is published at it or a pin
// reads it. When an engine stops publishing a slot (unpublish, a key moved
// away, or an engine's disconnect) the slot is free at once unless pinned;
// a pinned one is reported free, through the engine's `on_released`
// callback, when its last pin drops. Slots that become free without a
// request of the owning engine asking for them (its own key moved away by
// a re-publish) are reported through the same callback at once, so an
// engine learns of every slot it may reuse.
//
// Pins are shared_ptrs (session::PinRef) whose destruction unpins. A pin
// holds the engine's region, so a region stays mapped while any pin of it
// lives, even after its engine has gone.
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "daemon/node/shm_region.h"
#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

// Identifies one engine session for the daemon's lifetime (never reused).
using EngineId = uint64_t;

struct UnpublishResult {
  std::vector<protocol::SlotIndex> released;  // free now
  std::vector<protocol::SlotIndex> pinned;    // free once a released event names them
};

class NodePublishedBlocks : public session::PublishedBlocks {
 public:
  // Called with a slot of the engine that has just become free.
  using ReleasedFn = std::function<void(protocol::SlotIndex)>;

  NodePublishedBlocks();
  ~NodePublishedBlocks() override;
  NodePublishedBlocks(const NodePublishedBlocks&) = delete;
  NodePublishedBlocks& operator=(const NodePublishedBlocks&) = delete;

  // REQUIRES: `engine` was not added before.
  void AddEngine(EngineId engine, std::shared_ptr<ShmRegion> region, ReleasedFn on_released);
  // Withdraws every key of `engine`. It gets no more released events; live
  // pins keep reading its region until they drop. No-op if not added.
  void RemoveEngine(EngineId engine);

  // REQUIRES: `engine` added; keys.size() == slots.size(); every id
  // below the region's num_blocks. Returns how many keys were published.
  // `seal` (control-api.md `publish`): each named slot's XXH3-64 is taken
  // now and kept, and every pin of the slot taken while it stays published
  // sends that value, so a consumer fails a load whose source changed since;
  // an unsealed publish of a slot drops its kept value.
  size_t Publish(EngineId engine, const std::vector<protocol::Key>& keys,
                 const std::vector<protocol::SlotIndex>& slots, bool seal = false);
  // Withdraws those of `keys` that `engine` publishes (others are ignored).
  // A slot still holding another key is in neither list.
  UnpublishResult Unpublish(EngineId engine, const std::vector<protocol::Key>& keys);

  // session::PublishedBlocks.
  session::PinRef PinIfPublished(const protocol::Key& key) override;

  // Pins a slot of `engine` whether or not anything is published there.
  // `attachment` lives exactly as long as the pin (after the slot is
  // unpinned, it is released). `sealed`: the checksum the pin sends instead
  // of a fresh one (a sealed store). REQUIRES: `engine` added, slot in range.
  session::PinRef Pin(EngineId engine, protocol::SlotIndex slot, std::shared_ptr<const void> attachment,
                      std::optional<uint64_t> sealed = std::nullopt);

  // The XXH3-64 of a slot of `engine` as it is now, for a sealed publish or
  // store; nullopt when the region's file no longer covers it.
  // REQUIRES: `engine` added, slot in range.
  std::optional<uint64_t> SealOf(EngineId engine, protocol::SlotIndex slot) const;

  // Keys `engine` publishes now (0 if unknown).
  size_t published(EngineId engine) const;
  // Live pins of one slot (tests, diagnostics).
  uint32_t live_pins(EngineId engine, protocol::SlotIndex slot) const;
  // Distinct keys published on the node.
  size_t size() const { return keys_.size(); }
  // Engines holding `key` now (tests, diagnostics).
  uint32_t holders(const protocol::Key& key) const;
  // Live pins on the node (metrics), also those of engines gone already.
  uint64_t pins_total() const { return *live_pins_; }

  // An engine's slots; opaque, defined in published_blocks.cc.
  struct Engine;

 private:
  struct Location {
    EngineId engine;
    protocol::SlotIndex slot;
  };

  // `engine`'s holding among `holders`, or null.
  static Location* Holding(std::vector<Location>& holders, EngineId engine);

  // Holders in publish order; never empty (a key without holders is erased).
  std::unordered_map<protocol::Key, std::vector<Location>> keys_;
  std::unordered_map<EngineId, std::shared_ptr<Engine>> engines_;
  // Shared with every engine's state, so a pin outliving the index counts down safely.
  std::shared_ptr<uint64_t> live_pins_;
};

// The destination of loads into `region`. Holding the sink keeps the region
// mapped.
session::SlotSinkRef MakeSlotSink(std::shared_ptr<ShmRegion> region);

}  // namespace kvpeer::daemon
