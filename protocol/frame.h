// Frame prefix encoding and one-shot frame encoding.
//
// A frame is: magic "KVP1" | header_len (u32 BE) | payload_len (u64 BE) |
// header JSON | payload. EncodeFrame produces everything up to the payload;
// a block_data payload is appended by the writer from the blocks' memory
// (scatter/gather), never copied into the frame string.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "protocol/limits.h"
#include "protocol/messages.h"
#include "base/status.h"

namespace kvpeer::protocol {

struct FramePrefix {
  uint32_t header_len = 0;
  uint64_t payload_len = 0;
};

std::array<uint8_t, kPrefixLen> EncodePrefix(const FramePrefix& prefix);

// Checks magic and both length limits.
Status DecodePrefix(const uint8_t (&bytes)[kPrefixLen], FramePrefix* out);

// Prefix + header JSON of `message`, announcing `payload_len` payload bytes
// that the caller sends next.
std::string EncodeFrame(const Message& message, uint64_t payload_len = 0);

}  // namespace kvpeer::protocol
