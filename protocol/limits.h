// Numeric limits of wire protocol 1.1 (docs/wire-protocol.md, "2. Framing"
// and "3. Field rules"). Every bound the decoder or the validators enforce
// is named here once. "section N" below is a section of the wire spec.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvpeer::protocol {

inline constexpr uint8_t kMagic[4] = {'K', 'V', 'P', '1'};
inline constexpr size_t kPrefixLen = 16;  // magic + header_len + payload_len

inline constexpr uint32_t kMinHeaderLen = 2;                     // "{}"
inline constexpr uint32_t kMaxHeaderLen = 16u * 1024 * 1024;     // 16 MiB
inline constexpr uint64_t kMaxPayloadLen = 64ull * 1024 * 1024;  // 64 MiB

inline constexpr uint64_t kWireMajor = 1;
inline constexpr uint64_t kWireMinor = 1;
// A peer speaking 1.0 still interoperates when no PSK is configured (its
// framing and messages are 1.1's); with a PSK it is refused (section 5).
inline constexpr uint64_t kMinWireMinorWithPsk = 1;

// Before a connection is ready (section 2): only connect, connect_ack,
// disconnect, ping and pong, each with at most this header and no payload.
// The decoder checks both on the 16-byte prefix, so an unauthenticated peer
// can never make a node buffer more than 64 KiB of header.
inline constexpr uint32_t kMaxHeaderLenBeforeReady = 64u * 1024;  // 65,536
inline constexpr uint64_t kMaxPayloadLenBeforeReady = 0;

inline constexpr size_t kMaxStringChars = 4096;  // peer_id, kv_request_id, hash_seed, reason, fingerprint
inline constexpr size_t kMaxKeyBytes = 4096;     // one key, in bytes (8192 hex digits)
inline constexpr size_t kMaxListItems = 65536;   // keys, block_indexes, hits
inline constexpr uint64_t kMaxSlotIndex = (1ull << 31) - 1;
inline constexpr uint64_t kMaxBlockLen = 64ull * 1024 * 1024;  // one block fits one frame
inline constexpr size_t kTokenHexDigits = 32;                  // epoch, nonce: 16 bytes as hex

inline constexpr size_t kMaxPeerIdChars = 261;    // HOST:PORT (section 2)
inline constexpr size_t kMaxFeatures = 16;        // connect.features (sections 3, 7)
inline constexpr size_t kChecksumHexDigits = 16;  // an element of block_data.xxh3 (section 7)
inline constexpr size_t kMaxFeatureNameChars = 64;

}  // namespace kvpeer::protocol
