// The checksum of one block, as block_data.xxh3 carries it (wire-protocol.md
// section 7): XXH3-64 with seed 0 over the block's bytes.
//
// Producers hash a frame's blocks just before writing its header, so the
// bytes are warm for the kernel's copy; consumers hash each block once it has
// fully landed in its slot. Both go through this one function so the two ends
// can never disagree on the definition.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <span>

namespace kvpeer::protocol {

uint64_t BlockChecksum(std::span<const std::byte> block);

}  // namespace kvpeer::protocol
