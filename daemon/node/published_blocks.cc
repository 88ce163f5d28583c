#include "daemon/node/published_blocks.h"

#include "daemon/node/guarded_read.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kvpeer::daemon {

using protocol::Key;
using protocol::SlotIndex;

// One slot that is published, pinned, or waiting to be reported free.
// Absent from the map = free and unreported-free: nothing to track.
struct SlotState {
  // The keys published here, as the index's own key strings (stable: the
  // index's map never moves its nodes), so a slot's keys can be withdrawn
  // without a scan of the whole index.
  std::vector<const Key*> keys;
  uint32_t pins = 0;               // live PinRefs reading it
  bool release_pending = false;    // withdrawn while pinned: report when unpinned
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
  uint64_t key_bytes = 0;               // with kHoldingBytes per key
  std::shared_ptr<uint64_t> node_pins;  // the index's count of live pins
  // Reaches the index's OnSealBroken while the index and the engine live.
  std::function<void(SlotIndex, uint64_t)> on_seal_broken;

  void Released(SlotIndex slot) {
    if (on_released) on_released(slot);
  }

  // `key` at `slot` was withdrawn. Returns true when the slot became free
  // now; false when it is still pinned (reported later) or holds other keys.
  bool Withdraw(SlotIndex slot, const Key* key, bool* pinned) {
    --published;
    key_bytes -= key->size() + kHoldingBytes;
    SlotState& state = slots[slot];
    std::erase(state.keys, key);
    *pinned = false;
    if (!state.keys.empty()) return false;
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
    if (it == slots.end() || --it->second.pins > 0 || !it->second.keys.empty()) return;
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
    published_seal_ = !sealed && state.sealed;
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
  // Hashed again after the write (docs/vllm.md, "Serving without pins"):
  // the engine may have reused a sealed slot without unpublishing it.
  bool SealHoldsAfterWrite() const override {
    if (!sealed_) return true;
    const std::optional<uint64_t> now = Readable() ? GuardedChecksum(bytes()) : std::nullopt;
    if (now == sealed_) return true;
    // A published seal's keys now name other bytes: they go. (A sealed
    // store's slots are the engine's job, which fails with the round.)
    if (now && published_seal_ && engine_->on_seal_broken) engine_->on_seal_broken(slot_, *sealed_);
    return false;
  }

 private:
  std::shared_ptr<NodePublishedBlocks::Engine> engine_;
  SlotIndex slot_;
  std::shared_ptr<const void> attachment_;
  std::optional<uint64_t> sealed_;
  bool published_seal_ = false;  // sealed_ came from a sealed publish of the slot
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

NodePublishedBlocks::NodePublishedBlocks()
    : live_pins_(std::make_shared<uint64_t>(0)), self_(std::make_shared<NodePublishedBlocks*>(this)) {}
NodePublishedBlocks::~NodePublishedBlocks() = default;

void NodePublishedBlocks::AddEngine(EngineId engine, std::shared_ptr<ShmRegion> region, ReleasedFn on_released) {
  auto state = std::make_shared<Engine>();
  state->region = std::move(region);
  state->on_released = std::move(on_released);
  state->node_pins = live_pins_;
  std::weak_ptr<NodePublishedBlocks*> index = self_;
  state->on_seal_broken = [index, engine](SlotIndex slot, uint64_t seal) {
    if (auto self = index.lock()) (*self)->OnSealBroken(engine, slot, seal);
  };
  engines_[engine] = std::move(state);
}

void NodePublishedBlocks::RemoveEngine(EngineId engine) {
  auto it = engines_.find(engine);
  if (it == engines_.end()) return;
  it->second->on_released = nullptr;
  it->second->on_seal_broken = nullptr;
  // Only this engine's holdings go; other engines holding the same keys keep them.
  for (auto key = keys_.begin(); key != keys_.end();) {
    std::erase_if(key->second, [engine](const Location& holder) { return holder.engine == engine; });
    key = key->second.empty() ? keys_.erase(key) : std::next(key);
  }
  // Pins may outlive this; they find no keys and report to nobody.
  for (auto slot = it->second->slots.begin(); slot != it->second->slots.end();) {
    slot->second.keys.clear();
    slot = slot->second.pins == 0 ? it->second->slots.erase(slot) : std::next(slot);
  }
  it->second->published = 0;
  it->second->key_bytes = 0;
  engines_.erase(it);
}

NodePublishedBlocks::Location* NodePublishedBlocks::Holding(std::vector<Location>& holders, EngineId engine) {
  for (Location& holder : holders) {
    if (holder.engine == engine) return &holder;
  }
  return nullptr;
}

std::vector<SlotIndex> NodePublishedBlocks::ChangedSlots(const Engine& owner, const SlotSeals& seals) const {
  std::vector<SlotIndex> changed;
  for (const auto& [slot, seal] : seals) {
    auto it = owner.slots.find(slot);
    if (it == owner.slots.end() || it->second.keys.empty() || !it->second.sealed) continue;
    if (seal != it->second.sealed) changed.push_back(slot);
  }
  return changed;
}

// The state the publish would leave, computed without changing anything:
// each distinct key ends at the slot of its last entry; keys at a changed
// slot are withdrawn first.
Status NodePublishedBlocks::CheckLimits(EngineId engine, const Engine& owner, const std::vector<Key>& keys,
                                        const std::vector<SlotIndex>& slots,
                                        const std::vector<SlotIndex>& changed) const {
  if (limits_.max_keys_per_slot == 0 && limits_.max_key_bytes == 0) return Status::Ok();
  std::unordered_map<const Key*, SlotIndex> final_slot;  // by the request's own strings
  std::unordered_map<std::string_view, const Key*> first;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key* canonical = first.try_emplace(keys[i], &keys[i]).first->second;
    final_slot[canonical] = slots[i];
  }
  std::unordered_map<SlotIndex, int64_t> count;
  auto count_of = [&](SlotIndex slot) -> int64_t& {
    auto [it, added] = count.try_emplace(slot, 0);
    if (added) {
      auto state = owner.slots.find(slot);
      it->second = state == owner.slots.end() ? 0 : static_cast<int64_t>(state->second.keys.size());
    }
    return it->second;
  };
  int64_t bytes = static_cast<int64_t>(owner.key_bytes);
  for (SlotIndex slot : changed) {
    for (const Key* key : owner.slots.at(slot).keys) bytes -= static_cast<int64_t>(key->size() + kHoldingBytes);
    count_of(slot) = 0;
  }
  const std::unordered_set<SlotIndex> changed_set(changed.begin(), changed.end());  // a search per key, not a scan
  auto is_changed = [&](SlotIndex slot) { return changed_set.contains(slot); };
  for (const auto& [key, slot] : final_slot) {
    std::optional<SlotIndex> held;
    if (auto it = keys_.find(*key); it != keys_.end()) {
      for (const Location& holder : it->second) {
        if (holder.engine == engine && !is_changed(holder.slot)) held = holder.slot;
      }
    }
    if (held == slot) continue;
    if (held) {
      --count_of(*held);
    } else {
      bytes += static_cast<int64_t>(key->size() + kHoldingBytes);
    }
    ++count_of(slot);
  }
  if (limits_.max_key_bytes != 0 && bytes > static_cast<int64_t>(limits_.max_key_bytes)) {
    return Refuse(Counter::kLimitMaxPublishedKeyBytes, engine,
                  "max-published-key-bytes (" + std::to_string(limits_.max_key_bytes) +
                      ") reached: this engine's published keys would take " + std::to_string(bytes) +
                      " bytes (key bytes plus " + std::to_string(kHoldingBytes) + " per key); unpublish keys first");
  }
  for (const auto& [slot, n] : count) {
    if (limits_.max_keys_per_slot == 0 || n <= static_cast<int64_t>(limits_.max_keys_per_slot)) continue;
    return Refuse(Counter::kLimitMaxKeysPerSlot, engine,
                  "max-keys-per-slot (" + std::to_string(limits_.max_keys_per_slot) + ") reached: block id " +
                      std::to_string(slot) + " would hold " + std::to_string(n) +
                      " keys of this engine; unpublish its older keys first");
  }
  return Status::Ok();
}

Status NodePublishedBlocks::Refuse(Counter counter, EngineId engine, std::string why) const {
  limit_log_.Hit(counters_, counter, "publish of engine " + std::to_string(engine) + " refused: " + why);
  return Status::Conflict(std::move(why));
}

void NodePublishedBlocks::WithdrawSlot(EngineId engine, Engine& owner, SlotIndex slot, bool report) {
  auto state = owner.slots.find(slot);
  if (state == owner.slots.end()) return;
  const std::vector<const Key*> held = state->second.keys;  // Withdraw edits the list
  for (const Key* key : held) {
    const Key name = *key;  // the string dies with its map entry below
    auto it = keys_.find(name);
    bool pinned = false;
    const bool freed = owner.Withdraw(slot, key, &pinned);
    std::erase_if(it->second, [engine](const Location& holder) { return holder.engine == engine; });
    if (it->second.empty()) keys_.erase(it);
    if (freed && report) owner.Released(slot);
  }
}

void NodePublishedBlocks::OnSealBroken(EngineId engine, SlotIndex slot, uint64_t seal) {
  auto owner = engines_.find(engine);
  if (owner == engines_.end()) return;
  auto state = owner->second->slots.find(slot);
  if (state == owner->second->slots.end() || state->second.sealed != seal) return;  // sealed again since
  ++seals_broken_;
  if (counters_ != nullptr) counters_->Add(Counter::kSealsBroken);
  spdlog::warn(
      "engine {}: block id {} changed after it was published sealed and a peer was sent it; its keys are "
      "withdrawn and the round failed (docs/vllm.md, \"Serving without pins\")",
      engine, slot);
  WithdrawSlot(engine, *owner->second, slot, /*report=*/true);
}

Status NodePublishedBlocks::Publish(EngineId engine, const std::vector<Key>& keys, const std::vector<SlotIndex>& slots,
                                    const SlotSeals* seals) {
  Engine& owner = *engines_.at(engine);
  const std::vector<SlotIndex> changed = seals ? ChangedSlots(owner, *seals) : std::vector<SlotIndex>{};
  if (Status over = CheckLimits(engine, owner, keys, slots, changed); !over.ok()) return over;
  // Keys whose slot changed bytes since their seal name bytes that are gone.
  // Republished by this request at once, so no release is reported.
  for (SlotIndex slot : changed) WithdrawSlot(engine, owner, slot, /*report=*/false);
  std::vector<SlotIndex> moved_from;  // slots this request's moves emptied
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [entry, added] = keys_.try_emplace(keys[i]);
    const Key* key = &entry->first;
    std::vector<Location>& holders = entry->second;
    if (Location* held = Holding(holders, engine)) {
      if (held->slot == slots[i]) continue;  // already there
      // A move of this engine's own holding: its old slot may become free,
      // and the engine hears of it (its own request caused it) once the
      // whole request is in, unless a later key of it lands there.
      bool pinned = false;
      if (owner.Withdraw(held->slot, key, &pinned)) moved_from.push_back(held->slot);
      held->slot = slots[i];
    } else {
      holders.push_back(Location{engine, slots[i]});
    }
    SlotState& slot = owner.slots[slots[i]];
    slot.keys.push_back(key);
    // Reusing a slot before its release was reported is the engine's
    // business; it is published again, so nothing is owed for it.
    slot.release_pending = false;
    ++owner.published;
    owner.key_bytes += key->size() + kHoldingBytes;
  }
  // The engine vouches for the slots' bytes as they are now: a sealed
  // publish keeps their checksum, an unsealed one drops an older seal. Set
  // after the keys, so that a move emptying a slot this request publishes
  // again cannot drop its new seal. (A pin taken earlier keeps the value it
  // began with.)
  for (SlotIndex slot : slots) {
    auto it = owner.slots.find(slot);
    if (it == owner.slots.end() || it->second.keys.empty()) continue;  // moved away again later in the request
    if (seals) {
      it->second.sealed = seals->at(slot);
    } else {
      it->second.sealed.reset();
    }
  }
  std::sort(moved_from.begin(), moved_from.end());
  moved_from.erase(std::unique(moved_from.begin(), moved_from.end()), moved_from.end());
  for (SlotIndex slot : moved_from) {
    auto it = owner.slots.find(slot);
    if (it == owner.slots.end() || it->second.keys.empty()) owner.Released(slot);
  }
  return Status::Ok();
}

UnpublishResult NodePublishedBlocks::Unpublish(EngineId engine, const std::vector<Key>& keys) {
  UnpublishResult result;
  auto owner = engines_.find(engine);
  if (owner == engines_.end()) return result;
  for (const Key& name : keys) {
    auto it = keys_.find(name);
    if (it == keys_.end()) continue;
    Location* held = Holding(it->second, engine);
    if (held == nullptr) continue;  // another engine's holding is not this one's to withdraw
    const SlotIndex slot = held->slot;
    bool pinned = false;
    const bool freed = owner->second->Withdraw(slot, &it->first, &pinned);
    std::erase_if(it->second, [engine](const Location& holder) { return holder.engine == engine; });
    if (it->second.empty()) keys_.erase(it);
    if (freed) result.released.push_back(slot);
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

uint64_t NodePublishedBlocks::published_key_bytes(EngineId engine) const {
  auto it = engines_.find(engine);
  return it == engines_.end() ? 0 : it->second->key_bytes;
}

uint32_t NodePublishedBlocks::keys_at(EngineId engine, SlotIndex slot) const {
  auto it = engines_.find(engine);
  if (it == engines_.end()) return 0;
  auto state = it->second->slots.find(slot);
  return state == it->second->slots.end() ? 0 : static_cast<uint32_t>(state->second.keys.size());
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
