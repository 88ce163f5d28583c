// XXH3-64 compiled for AVX2 from xxHash's own header (XXH_INLINE_ALL), for
// BlockChecksum to pick on CPUs that have AVX2. Debian's libxxhash is built
// for baseline x86-64 (SSE2), which hashes at ~20 GB/s whether or not the
// bytes are in cache; this runs at ~48 GB/s in cache and ~30 GB/s from
// memory on our machine class (docs/performance.md, "Checksums (xxh3) and
// seals"). Same function, same values: only the instructions differ.
//
// Thread-safety: a pure function. Call it only where the CPU has AVX2.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvpeer::protocol::internal {

// Whether this build has the AVX2 variant at all (x86-64 only).
bool HaveXxh3Avx2Build();
uint64_t Xxh3Avx2(const void* data, size_t size);

}  // namespace kvpeer::protocol::internal
