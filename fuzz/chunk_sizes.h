// How a fuzz target splits its input into reads: chunk sizes 1 ..= 2^(seed
// % 8), either fixed or varying (xorshift), so one input byte selects
// byte-at-a-time, small-chunk or bulk feeding.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvpeer::fuzz {

class ChunkSizes {
 public:
  explicit ChunkSizes(uint8_t seed) : max_(size_t{1} << (seed & 7)), vary_(seed & 8), state_(seed | 1u) {}
  size_t Next() {
    if (!vary_) return max_;
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return 1 + state_ % max_;
  }

 private:
  size_t max_;
  bool vary_;
  uint32_t state_;
};

}  // namespace kvpeer::fuzz
