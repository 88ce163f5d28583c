#include "protocol/block_checksum.h"

#include <xxhash.h>

namespace kvpeer::protocol {

uint64_t BlockChecksum(std::span<const std::byte> block) {
  return XXH3_64bits(block.data(), block.size());
}

}  // namespace kvpeer::protocol
