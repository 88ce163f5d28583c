// Test doubles for the session layer: a hand-moved clock, in-memory block
// regions, a node-wide index over them, and a frame log standing in for the
// connection. They are real implementations of the session interfaces over
// process memory, not mocks: bytes really move through them.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::session::testing {

class FakeClock {
 public:
  TimePoint now() const { return now_; }
  void Advance(Duration d) { now_ += d; }
  Clock AsClock() {
    return [this] { return now_; };
  }

 private:
  TimePoint now_ = TimePoint() + std::chrono::hours(1);
};

// num_blocks * block_len bytes; also counts the live pins of each block.
class MemoryRegion : public std::enable_shared_from_this<MemoryRegion> {
 public:
  MemoryRegion(uint32_t num_blocks, uint64_t block_len)
      : block_len_(block_len), bytes_(num_blocks * block_len), pins_(num_blocks, 0) {}

  uint64_t block_len() const { return block_len_; }
  std::span<uint8_t> Block(uint32_t index) { return {bytes_.data() + index * block_len_, block_len_}; }
  // Fills a block with bytes derived from `seed` so a reader can verify them.
  void Fill(uint32_t index, uint64_t seed) {
    auto block = Block(index);
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint8_t>((seed * 131 + i * 7) >> 3);
  }
  int live_pins(uint32_t index) const { return pins_[index]; }
  int total_live_pins() const {
    int total = 0;
    for (int p : pins_) total += p;
    return total;
  }

  PinRef Pin(uint32_t index);
  SlotSinkRef Sink();
  // As if the engine truncated its region file: pins stop being readable
  // and sinks writable (the bytes stay, so a test can see none changed).
  void Truncate() { truncated_ = true; }
  bool truncated() const { return truncated_; }

 private:
  friend class MemoryPin;
  uint64_t block_len_;
  std::vector<uint8_t> bytes_;
  std::vector<int> pins_;
  bool truncated_ = false;
};

class MemoryPin : public PinnedBlock {
 public:
  MemoryPin(std::shared_ptr<MemoryRegion> region, uint32_t index) : region_(std::move(region)), index_(index) {
    ++region_->pins_[index_];
  }
  ~MemoryPin() override { --region_->pins_[index_]; }
  std::span<const uint8_t> bytes() const override { return region_->Block(index_); }
  bool Readable() const override { return !region_->truncated(); }

 private:
  std::shared_ptr<MemoryRegion> region_;
  uint32_t index_;
};

inline PinRef MemoryRegion::Pin(uint32_t index) { return std::make_shared<MemoryPin>(shared_from_this(), index); }

class MemorySink : public SlotSink {
 public:
  explicit MemorySink(std::shared_ptr<MemoryRegion> region) : region_(std::move(region)) {}
  std::span<uint8_t> Slot(protocol::SlotIndex index) override { return region_->Block(index); }
  bool Writable() const override { return !region_->truncated(); }

 private:
  std::shared_ptr<MemoryRegion> region_;
};

inline SlotSinkRef MemoryRegion::Sink() { return std::make_shared<MemorySink>(shared_from_this()); }

// A PublishedBlocks over one region: key -> block index.
class MemoryIndex : public PublishedBlocks {
 public:
  explicit MemoryIndex(std::shared_ptr<MemoryRegion> region) : region_(std::move(region)) {}
  void Publish(const protocol::Key& key, uint32_t index) { published_[key] = index; }
  void Unpublish(const protocol::Key& key) { published_.erase(key); }
  PinRef PinIfPublished(const protocol::Key& key) override {
    auto it = published_.find(key);
    return it == published_.end() ? nullptr : region_->Pin(it->second);
  }

 private:
  std::shared_ptr<MemoryRegion> region_;
  std::map<protocol::Key, uint32_t> published_;
};

// Captures sent frames in order.
class FrameLog {
 public:
  SendFn AsSend() {
    return [this](OutFrame frame) { frames.push_back(std::move(frame)); };
  }
  template <typename T>
  std::vector<T> All() const {
    std::vector<T> out;
    for (const auto& f : frames)
      if (const T* m = std::get_if<T>(&f.message)) out.push_back(*m);
    return out;
  }
  template <typename T>
  size_t Count() const {
    return All<T>().size();
  }
  void Clear() { frames.clear(); }

  std::vector<OutFrame> frames;
};

}  // namespace kvpeer::session::testing
