// The bounds of the control API's request fields (docs/control-api.md,
// "1. Transport and framing", the field table), each defined once: the
// parsers (request_parsers.h), their tests (which check the docs' table
// against these), and the control fuzz target all read them from here.
// Bounds shared with the wire (string lengths, key sizes, list lengths,
// block_len) are protocol/limits.h's, named here under their API names.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/limits.h"

namespace kvpeer::daemon {

// `client`, `config_fingerprint`, `kv_request_id`, `hash_seed`, `peer`:
// at most this many characters (the wire's rule for its strings).
inline constexpr size_t kMaxRequestStringChars = protocol::kMaxStringChars;
// `block_len`: 1 ..= this (one block fits one frame).
inline constexpr uint64_t kMaxRequestBlockLen = protocol::kMaxBlockLen;
// `keys`, `block_ids`: at most this many items.
inline constexpr size_t kMaxRequestListItems = protocol::kMaxListItems;
// `keys`: 1 ..= this many bytes per key.
inline constexpr size_t kMaxRequestKeyBytes = protocol::kMaxKeyBytes;
// `num_blocks` of `register_region`: 1 ..= 2^31.
inline constexpr uint64_t kMaxNumBlocks = uint64_t{1} << 31;
// `path` of `register_region`: 1 ..= this many characters.
inline constexpr size_t kMaxPathChars = 4096;
// `wait_ms` of `lookup` and `poll`: 0 ..= 60000.
inline constexpr uint64_t kMaxWaitMs = 60000;

}  // namespace kvpeer::daemon
