// JSON encoding and strict decoding of message headers.
//
// DecodeHeader applies every field rule of the wire spec: strict JSON types
// (a bool is not an integer), string and list bounds, lowercase even-length
// hex keys, block-index and round_seq ranges, equal-length parallel arrays,
// and the payload rules (only block_data carries one, of exactly
// len(block_indexes) * block_len bytes). A rejection is a kViolation Status
// whose message names the field and the rule, e.g.
// "lookup.keys[2]: must be lowercase hex with an even number of digits".
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/messages.h"
#include "base/status.h"

namespace kvpeer::protocol {

// The header JSON of `message` (compact, UTF-8). Keys become lowercase hex.
std::string EncodeHeader(const Message& message);
// The same, appended to `out` (EncodeFrame writes it after the prefix
// without a second copy of a header that may hold 65,536 keys).
void AppendHeader(const Message& message, std::string* out);

struct DecodeContext {
  // The connection's block_len, used to check a block_data payload length.
  // 0 means "not known": the payload-length check is then skipped.
  uint64_t block_len = 0;
};

// Parses and validates one frame header. `payload_len` is the frame's
// payload length from its prefix. On success *out holds the message (Unknown
// for an unrecognised `type`); on failure *out is unspecified.
Status DecodeHeader(std::string_view header_json, uint64_t payload_len, const DecodeContext& context, Message* out);

// A block checksum as block_data.xxh3 carries it: 16 lowercase hex digits,
// leading zeros kept (spec section 7).
std::string ChecksumHex(uint64_t checksum);
// The same digits appended to `out`.
void AppendChecksumHex(uint64_t checksum, std::string* out);

}  // namespace kvpeer::protocol
