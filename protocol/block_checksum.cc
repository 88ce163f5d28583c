#include "protocol/block_checksum.h"

#include <xxhash.h>

#include "protocol/internal/xxh3_avx2.h"

namespace kvpeer::protocol {
namespace {

using HashFunction = uint64_t (*)(const void*, size_t);

uint64_t Xxh3Baseline(const void* data, size_t size) { return XXH3_64bits(data, size); }

// Chosen once, by what this CPU can run.
HashFunction ChooseXxh3() {
#if defined(__x86_64__)
  if (internal::HaveXxh3Avx2Build() && __builtin_cpu_supports("avx2")) return internal::Xxh3Avx2;
#endif
  return Xxh3Baseline;
}

}  // namespace

uint64_t BlockChecksum(std::span<const std::byte> block) {
  static const HashFunction hash = ChooseXxh3();
  return hash(block.data(), block.size());
}

}  // namespace kvpeer::protocol
