#include "protocol/internal/xxh3_avx2.h"

#if defined(__x86_64__) && defined(__AVX2__)
// This file alone is compiled with -mavx2 (protocol/CMakeLists.txt).
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

namespace kvpeer::protocol::internal {

bool HaveXxh3Avx2Build() { return true; }
uint64_t Xxh3Avx2(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace kvpeer::protocol::internal
#else
#include <cstdlib>

namespace kvpeer::protocol::internal {

bool HaveXxh3Avx2Build() { return false; }
uint64_t Xxh3Avx2(const void*, size_t) { std::abort(); }

}  // namespace kvpeer::protocol::internal
#endif
