#include "daemon/peer/block_staging.h"

#include <algorithm>

namespace kvpeer::daemon {

std::span<uint8_t> BlockStaging::Room(std::span<uint8_t> target) {
  if (state_ != State::kStaging || target.data() != destination_.data()) {
    destination_ = target.first(std::min(target.size(), kMaxPieceBytes));
    filled_ = 0;
    state_ = State::kStaging;
    // Grows to the largest piece seen, never past kMaxPieceBytes; no read
    // is in flight here (Room is called just before one starts).
    if (buffer_.size() < destination_.size()) buffer_.resize(destination_.size());
  }
  return std::span<uint8_t>(buffer_).subspan(filled_, destination_.size() - filled_);
}

BlockStaging::Arrival BlockStaging::Add(size_t n) {
  if (state_ == State::kDropped) {
    state_ = State::kIdle;
    return Arrival::kDiscarded;
  }
  filled_ += n;
  return filled_ == destination_.size() ? Arrival::kWhole : Arrival::kPartial;
}

void BlockStaging::Clear() {
  state_ = State::kIdle;
  destination_ = {};
  filled_ = 0;
}

size_t BlockStaging::Drop() {
  if (state_ != State::kStaging) return 0;
  const size_t staged = filled_;
  state_ = State::kDropped;
  destination_ = {};
  filled_ = 0;
  return staged;
}

}  // namespace kvpeer::daemon
