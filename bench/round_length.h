// How long one bulk round lasts: until it has moved at least `min_bytes`
// AND run for at least `min_seconds`. A round of a fixed size lasts 0.4 s at
// 1 GiB, too short to be stable on a shared VM (issue 14: 4 GiB or 3 s,
// whichever is longer), and a fixed time alone would let a slow round move
// too few frames to average over.
//
// Thread-safety: a value; Reached() has no side effects.
#pragma once

#include <cstdint>

namespace kvpeer::bench {

struct RoundLength {
  uint64_t min_bytes = 0;
  double min_seconds = 0;

  bool Reached(uint64_t bytes, int64_t elapsed_ns) const {
    return bytes >= min_bytes && static_cast<double>(elapsed_ns) >= min_seconds * 1e9;
  }
};

}  // namespace kvpeer::bench
