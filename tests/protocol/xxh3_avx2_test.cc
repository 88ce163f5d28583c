// The AVX2 build of XXH3 (protocol/internal/xxh3_avx2.h) gives the values of
// Debian's libxxhash for every size class XXH3 treats differently (0, 1-3,
// 4-8, 9-16, 17-128, 129-240 bytes, long inputs, a stripe's and a block's
// edges), at unaligned starts, and BlockChecksum (whichever variant it
// picked) agrees with both.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <catch2/catch.hpp>
#include <xxhash.h>

#include "protocol/block_checksum.h"
#include "protocol/internal/xxh3_avx2.h"

namespace kvpeer::protocol {
namespace {

std::vector<uint8_t> Pattern(size_t size) {
  std::vector<uint8_t> bytes(size);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint8_t& byte : bytes) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    byte = static_cast<uint8_t>(x);
  }
  return bytes;
}

TEST_CASE("XXH3 for AVX2 equals libxxhash's XXH3 at every size class and alignment", "[checksum]") {
  const bool avx2 = internal::HaveXxh3Avx2Build() && __builtin_cpu_supports("avx2");
  const std::vector<uint8_t> data = Pattern((1 << 20) + 64);
  for (size_t size :
       {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 16383, 16384, 65536, (1 << 20) - 1, 1 << 20}) {
    for (size_t offset : {0, 1, 7, 32}) {
      const uint8_t* start = data.data() + offset;
      const uint64_t expected = XXH3_64bits(start, size);
      INFO("size " << size << " offset " << offset);
      CHECK(BlockChecksum(std::as_bytes(std::span(start, size))) == expected);
      if (avx2) CHECK(internal::Xxh3Avx2(start, size) == expected);
    }
  }
}

}  // namespace
}  // namespace kvpeer::protocol
