#include "daemon/node/published_blocks.h"

#include "daemon/node/guarded_read.h"

#include <utility>
#include <vector>

namespace kvpeer::daemon {

using protocol::SlotIndex;
using protocol::Key;

// One slot that is published, pinned, or waiting to be reported free.
// Absent from the map = free and unreported-free: nothing to track.
struct SlotState {
  uint32_t keys = 0;             // keys published at this slot
  uint32_t pins = 0;             // live PinRefs reading it
  bool release_pending = false;  // withdrawn while pinned: report when unpinned
  std::optional<uint64_t> sealed;  // the checksum kept by a sealed publish
};

// An engine's part of the index. Shared by the index and by every pin of the
// engine's region, so pins can unpin (and report) after the engine or even
// the index has gone.
struct NodePublishedBlocks::Engine {
  std::shared_ptr<ShmRegion> region;
  std::unordered_map<SlotIndex, SlotState> slots;
  ReleasedFn on_released;  // empty once the engine is removed
  size_t published = 0;
  std::shared_ptr<uint64_t> node_pins;  // the index's count of live pins

  void Released(SlotIndex slot) {
    if (on_released) on_released(slot);
  }

  // A key at `slot` was withdrawn. Returns true when the slot became free
  // now; false when it is still pinned (reported later) or holds other keys.
  bool Withdraw(SlotIndex slot, bool* pinned) {
    --published;
    SlotState& state = slots[slot];
    *pinned = false;
    if (--state.keys > 0) return false;
    state.sealed.reset();  // nothing published here vouches for these bytes any more
    if (state.pins > 0) {
      state.release_pending = true;
      *pinned = true;
      return false;
    }
    slots.erase(slot);
    return true;
  }

  void Unpin(SlotIndex slot) {
    auto it = slots.find(slot);
    if (it == slots.end() || --it->second.pins > 0 || it->second.keys > 0) return;
    const bool report = it->second.release_pending;
    slots.erase(it);
    if (report) Released(slot);
  }
};

namespace {

class SlotPin : public session::PinnedBlock {
 public:
  // `sealed` overrides the slot's own kept checksum (a sealed store).
  SlotPin(std::shared_ptr<NodePublishedBlocks::Engine> engine, SlotIndex slot, std::shared_ptr<const void> attachment,
          std::optional<uint64_t> sealed)
      : engine_(std::move(engine)), slot_(slot), attachment_(std::move(attachment)) {
    SlotState& state = engine_->slots[slot_];
    ++state.pins;
    ++*engine_->node_pins;
    // Taken now: what the slot's publisher vouched for when this pin began.
    sealed_ = sealed ? sealed : state.sealed;
  }
  // The slot is unpinned first; the attachment (e.g. a store job's guard)
  // is released after, so whoever it notifies sees the slot unpinned.
  ~SlotPin() override {
    --*engine_->node_pins;
    engine_->Unpin(slot_);
  }

  std::span<const uint8_t> bytes() const override { return engine_->region->Block(slot_); }
  bool Readable() const override { return engine_->region->StillBacked(); }
  // The sealed value when there is one (control-api.md `publish` `seal`),
  // so a slot changed since its seal fails the consumer's check.
  std::optional<uint64_t> Checksum() const override {
    if (sealed_) return sealed_;
    if (!Readable()) return std::nullopt;
    return GuardedChecksum(bytes());
  }

 private:
  std::shared_ptr<NodePublishedBlocks::Engine> engine_;
  SlotIndex slot_;
  std::shared_ptr<const void> attachment_;
  std::optional<uint64_t> sealed_;
};

class RegionSink : public session::SlotSink {
 public:
  explicit RegionSink(std::shared_ptr<ShmRegion> region) : region_(std::move(region)) {}
  // An index outside the region yields an empty span rather than memory
  // past the mapping; the control side never hands out such an index.
  std::span<uint8_t> Slot(SlotIndex index) override {
    if (index >= region_->num_blocks()) return {};
    return region_->Block(index);
  }
  bool Writable() const override { return region_->StillBacked(); }
  std::optional<uint64_t> LandedChecksum(SlotIndex index) override {
    if (!Writable()) return std::nullopt;
    return GuardedChecksum(Slot(index));
  }

 private:
  std::shared_ptr<ShmRegion> region_;
};

}  // namespace

NodePublishedBlocks::NodePublishedBlocks() : live_pins_(std::make_shared<uint64_t>(0)) {}
NodePublishedBlocks::~NodePublishedBlocks() = default;

void NodePublishedBlocks::AddEngine(EngineId engine, std::shared_ptr<ShmRegion> region, ReleasedFn on_released) {
  auto state = std::make_shared<Engine>();
  state->region = std::move(region);
  state->on_released = std::move(on_released);
  state->node_pins = live_pins_;
  engines_[engine] = std::move(state);
}

void NodePublishedBlocks::RemoveEngine(EngineId engine) {
  auto it = engines_.find(engine);
  if (it == engines_.end()) return;
  it->second->on_released = nullptr;
  // Only this engine's holdings go; other engines holding the same keys keep them.
  for (auto key = keys_.begin(); key != keys_.end();) {
    std::erase_if(key->second, [engine](const Location& holder) { return holder.engine == engine; });
    key = key->second.empty() ? keys_.erase(key) : std::next(key);
  }
  // Pins may outlive this; they find no keys and report to nobody.
  for (auto slot = it->second->slots.begin(); slot != it->second->slots.end();) {
    slot->second.keys = 0;
    slot = slot->second.pins == 0 ? it->second->slots.erase(slot) : std::next(slot);
  }
  it->second->published = 0;
  engines_.erase(it);
}

NodePublishedBlocks::Location* NodePublishedBlocks::Holding(std::vector<Location>& holders, EngineId engine) {
  for (Location& holder : holders) {
    if (holder.engine == engine) return &holder;
  }
  return nullptr;
}

size_t NodePublishedBlocks::Publish(EngineId engine, const std::vector<Key>& keys, const std::vector<SlotIndex>& slots,
                               bool seal) {
  Engine& owner = *engines_.at(engine);
  // The engine vouches for the slot's bytes as they are now: a sealed
  // publish takes their checksum, an unsealed one drops an older seal.
  // (A pin taken earlier keeps the value it began with.)
  for (SlotIndex slot : slots) {
    if (seal) {
      owner.slots[slot].sealed = SealOf(engine, slot);
    } else if (auto it = owner.slots.find(slot); it != owner.slots.end()) {
      it->second.sealed.reset();
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<Location>& holders = keys_[keys[i]];
    if (Location* held = Holding(holders, engine)) {
      if (held->slot == slots[i]) continue;  // already there
      // A move of this engine's own holding: its old slot may become free,
      // and the engine hears of it (its own request caused it).
      bool pinned = false;
      if (owner.Withdraw(held->slot, &pinned)) owner.Released(held->slot);
      held->slot = slots[i];
    } else {
      holders.push_back(Location{engine, slots[i]});
    }
    SlotState& slot = owner.slots[slots[i]];
    ++slot.keys;
    // Reusing a slot before its release was reported is the engine's
    // business; it is published again, so nothing is owed for it.
    slot.release_pending = false;
    ++owner.published;
  }
  return keys.size();
}

UnpublishResult NodePublishedBlocks::Unpublish(EngineId engine, const std::vector<Key>& keys) {
  UnpublishResult result;
  auto owner = engines_.find(engine);
  if (owner == engines_.end()) return result;
  for (const Key& key : keys) {
    auto it = keys_.find(key);
    if (it == keys_.end()) continue;
    Location* held = Holding(it->second, engine);
    if (held == nullptr) continue;  // another engine's holding is not this one's to withdraw
    const SlotIndex slot = held->slot;
    std::erase_if(it->second, [engine](const Location& holder) { return holder.engine == engine; });
    if (it->second.empty()) keys_.erase(it);
    bool pinned = false;
    if (owner->second->Withdraw(slot, &pinned)) result.released.push_back(slot);
    if (pinned) result.pinned.push_back(slot);
  }
  return result;
}

session::PinRef NodePublishedBlocks::PinIfPublished(const Key& key) {
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.empty()) return nullptr;
  // Any holder may serve; the earliest one does.
  const Location& holder = it->second.front();
  return std::make_shared<SlotPin>(engines_.at(holder.engine), holder.slot, nullptr, std::nullopt);
}

uint32_t NodePublishedBlocks::holders(const Key& key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? 0 : static_cast<uint32_t>(it->second.size());
}

session::PinRef NodePublishedBlocks::Pin(EngineId engine, SlotIndex slot, std::shared_ptr<const void> attachment,
                                    std::optional<uint64_t> sealed) {
  return std::make_shared<SlotPin>(engines_.at(engine), slot, std::move(attachment), sealed);
}

std::optional<uint64_t> NodePublishedBlocks::SealOf(EngineId engine, SlotIndex slot) const {
  const ShmRegion& region = *engines_.at(engine)->region;
  if (!region.StillBacked()) return std::nullopt;
  return GuardedChecksum(region.Block(slot));
}

size_t NodePublishedBlocks::published(EngineId engine) const {
  auto it = engines_.find(engine);
  return it == engines_.end() ? 0 : it->second->published;
}

uint32_t NodePublishedBlocks::live_pins(EngineId engine, SlotIndex slot) const {
  auto it = engines_.find(engine);
  if (it == engines_.end()) return 0;
  auto state = it->second->slots.find(slot);
  return state == it->second->slots.end() ? 0 : state->second.pins;
}

session::SlotSinkRef MakeSlotSink(std::shared_ptr<ShmRegion> region) {
  return std::make_shared<RegionSink>(std::move(region));
}

}  // namespace kvpeer::daemon
