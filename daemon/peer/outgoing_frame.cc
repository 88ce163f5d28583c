#include "daemon/peer/outgoing_frame.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "daemon/node/shm_region.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;

// Zeros written in place of a torn payload, a few buffers at a time.
constexpr size_t kZeroChunk = 64 * 1024;
constexpr size_t kZeroBuffers = 16;
const std::array<uint8_t, kZeroChunk> kZeros{};

}  // namespace

OutgoingFrame::OutgoingFrame(const std::string& head, const std::vector<session::PinRef>& blocks,
                             std::vector<uint8_t>* bounce)
    : head_(head), blocks_(blocks), bounce_(bounce) {
  total_ = head_.size();
  for (const auto& block : blocks_) total_ += block->bytes().size();
}

const std::vector<asio::const_buffer>& OutgoingFrame::Next() {
  next_.clear();
  if (offset_ < head_.size()) {
    next_.emplace_back(head_.data() + offset_, head_.size() - offset_);
    if (bounce_ == nullptr && !torn_) NextPlain();  // one writev for head and payload
    return next_;
  }
  if (done()) return next_;
  if (torn_) {
    NextZeros();
  } else if (bounce_ == nullptr) {
    NextPlain();
  } else {
    NextBounced();
  }
  return next_;
}

// The source spans from the current payload offset on.
void OutgoingFrame::NextPlain() {
  uint64_t skip = payload_offset();
  for (const auto& block : blocks_) {
    const auto bytes = block->bytes();
    if (skip >= bytes.size()) {
      skip -= bytes.size();
      continue;
    }
    next_.emplace_back(bytes.data() + skip, bytes.size() - skip);
    skip = 0;
  }
}

// Refills the bounce buffer through the regions' descriptors when it is
// spent; a short read tears the frame at the first byte not read.
void OutgoingFrame::NextBounced() {
  if (bounce_begin_ == bounce_end_) {
    const uint64_t want = std::min<uint64_t>(total_ - offset_, kBounceBytes);
    bounce_->resize(std::max<size_t>(bounce_->size(), static_cast<size_t>(want)));
    uint64_t skip = payload_offset();
    size_t filled = 0;
    for (const auto& block : blocks_) {
      if (filled == want) break;
      const auto bytes = block->bytes();
      if (skip >= bytes.size()) {
        skip -= bytes.size();
        continue;
      }
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size() - skip, want - filled));
      if (!ShmRegion::ReadMapped(bytes.data() + skip, std::span<uint8_t>(bounce_->data() + filled, n))) {
        // What was read of this piece may be partial: from this piece on, zeros.
        std::memset(bounce_->data() + filled, 0, static_cast<size_t>(want) - filled);
        torn_ = true;
        break;
      }
      filled += n;
      skip = 0;
    }
    bounce_begin_ = 0;
    bounce_end_ = static_cast<size_t>(want);
  }
  next_.emplace_back(bounce_->data() + bounce_begin_, bounce_end_ - bounce_begin_);
}

void OutgoingFrame::NextZeros() {
  if (bounce_begin_ != bounce_end_) {  // zeros already staged in the bounce buffer go first
    next_.emplace_back(bounce_->data() + bounce_begin_, bounce_end_ - bounce_begin_);
    return;
  }
  uint64_t left = total_ - offset_;
  for (size_t i = 0; i < kZeroBuffers && left > 0; ++i) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, kZeroChunk));
    next_.emplace_back(kZeros.data(), n);
    left -= n;
  }
}

void OutgoingFrame::Consumed(size_t n) {
  if (offset_ >= head_.size() && bounce_begin_ != bounce_end_) {
    bounce_begin_ += n;  // a bounced write never spans the head
  }
  offset_ += n;
}

bool OutgoingFrame::TearHere() {
  if (offset_ < head_.size()) return false;
  torn_ = true;
  return true;
}

bool OutgoingFrame::CheckSourcesAfterWrite() {
  if (!torn_ && bounce_ == nullptr) {
    // One fstat per source region, not one per block.
    std::vector<std::span<const uint8_t>> sources;
    sources.reserve(blocks_.size());
    for (const auto& block : blocks_) sources.push_back(block->bytes());
    torn_ = !ShmRegion::StillMapFiles(sources);
  }
  return torn_;
}

}  // namespace kvpeer::daemon
