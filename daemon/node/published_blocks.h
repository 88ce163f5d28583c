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
// Seals without pins (docs/vllm.md, "Serving without pins"). An engine may
// publish sealed and then reuse a slot without telling the daemon first
// (vLLM's tier does: vLLM evicts by its own policy). Three things keep a
// peer from ever getting other bytes under a key: a sealed re-publish of a
// slot whose bytes changed withdraws the slot's older keys; every sealed
// block a peer was sent is hashed again after the write, and a mismatch
// fails the round and withdraws that slot's keys (SealHoldsAfterWrite);
// consumers with the xxh3 feature check the sealed value themselves.
//
// Bounds (docs/security.md, "Engine state is bounded in bytes"): the keys an
// engine publishes cost key bytes plus kHoldingBytes each, at most
// max_key_bytes per engine, and one slot holds at most max_keys_per_slot
// keys of its engine; a publish beyond either is refused whole.
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "daemon/metrics/counters.h"
#include "daemon/metrics/limit_reporter.h"
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

// The XXH3-64 of each distinct slot a sealed publish names, as hashed
// (nullopt: the slot's memory was gone, so nothing vouches for it).
using SlotSeals = std::unordered_map<protocol::SlotIndex, std::optional<uint64_t>>;

// Per-engine bounds of the index; 0 = unbounded.
struct PublishLimits {
  uint32_t max_keys_per_slot = 0;  // --max-keys-per-slot
  uint64_t max_key_bytes = 0;      // --max-published-key-bytes
};

class NodePublishedBlocks : public session::PublishedBlocks {
 public:
  // Called with a slot of the engine that has just become free.
  using ReleasedFn = std::function<void(protocol::SlotIndex)>;
  // What one published key costs beyond its own bytes (the map node, its
  // holder entry and its slot's reference), counted against max_key_bytes.
  static constexpr uint64_t kHoldingBytes = 96;

  NodePublishedBlocks();
  ~NodePublishedBlocks() override;
  NodePublishedBlocks(const NodePublishedBlocks&) = delete;
  NodePublishedBlocks& operator=(const NodePublishedBlocks&) = delete;

  // REQUIRES: `engine` was not added before.
  void AddEngine(EngineId engine, std::shared_ptr<ShmRegion> region, ReleasedFn on_released);
  // Withdraws every key of `engine`. It gets no more released events; live
  // pins keep reading its region until they drop. No-op if not added.
  void RemoveEngine(EngineId engine);

  void set_limits(PublishLimits limits) { limits_ = limits; }
  // Where limit hits (limit_max_keys_per_slot, limit_max_published_key_bytes)
  // and seals_broken are counted; null counts nothing.
  void set_counters(Counters* counters) { counters_ = counters; }

  // REQUIRES: `engine` added; keys.size() == slots.size(); every id
  // below the region's num_blocks; with `seals`, every slot in it.
  // `seals` (control-api.md `publish` `seal`): each slot's XXH3-64, taken by
  // the caller (off the event loop), is kept, and every pin of the slot
  // taken while it stays published sends that value, so a consumer fails a
  // load whose source changed since; a slot whose kept seal differs from the
  // new one changed bytes, so its older keys are withdrawn. Without `seals`
  // the publish drops the slots' kept values. Refused whole (conflict naming
  // the limit) when the engine would pass a PublishLimits bound.
  Status Publish(EngineId engine, const std::vector<protocol::Key>& keys, const std::vector<protocol::SlotIndex>& slots,
                 const SlotSeals* seals = nullptr);
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
  // Key bytes (with kHoldingBytes each) `engine` publishes now (0 if unknown).
  uint64_t published_key_bytes(EngineId engine) const;
  // Keys of `engine` at one slot now.
  uint32_t keys_at(EngineId engine, protocol::SlotIndex slot) const;
  // Sealed blocks found changed after they were sent.
  uint64_t seals_broken() const { return seals_broken_; }
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
  // Slots of `engine` whose kept seal differs from the new one in `seals`.
  std::vector<protocol::SlotIndex> ChangedSlots(const Engine& owner, const SlotSeals& seals) const;
  // conflict naming the bound `engine` would pass by this publish.
  Status CheckLimits(EngineId engine, const Engine& owner, const std::vector<protocol::Key>& keys,
                     const std::vector<protocol::SlotIndex>& slots,
                     const std::vector<protocol::SlotIndex>& changed) const;
  // Counts and logs a limit hit; conflict with `why`.
  Status Refuse(Counter counter, EngineId engine, std::string why) const;
  // Withdraws every key of `engine` at `slot`, reporting the slot free when
  // `report` (a reseal republishes it at once: no report).
  void WithdrawSlot(EngineId engine, Engine& owner, protocol::SlotIndex slot, bool report);
  // A pin found `slot` changed since `seal` after a write: its keys go,
  // unless the slot was sealed again since.
  void OnSealBroken(EngineId engine, protocol::SlotIndex slot, uint64_t seal);

  // Holders in publish order; never empty (a key without holders is erased).
  std::unordered_map<protocol::Key, std::vector<Location>> keys_;
  std::unordered_map<EngineId, std::shared_ptr<Engine>> engines_;
  // Shared with every engine's state, so a pin outliving the index counts down safely.
  std::shared_ptr<uint64_t> live_pins_;
  uint64_t seals_broken_ = 0;
  // Pins reach OnSealBroken only while this lives.
  std::shared_ptr<NodePublishedBlocks*> self_;
  PublishLimits limits_;
  Counters* counters_ = nullptr;
  mutable LimitReporter limit_log_;
};

// The destination of loads into `region`. Holding the sink keeps the region
// mapped.
session::SlotSinkRef MakeSlotSink(std::shared_ptr<ShmRegion> region);

}  // namespace kvpeer::daemon
