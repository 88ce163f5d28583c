#include "protocol/frame.h"

#include <cstring>

#include "base/hex.h"
#include "protocol/codec.h"

namespace kvpeer::protocol {
namespace {

void PutBigEndian(uint64_t value, size_t width, uint8_t* out) {
  for (size_t i = 0; i < width; ++i) {
    out[width - 1 - i] = static_cast<uint8_t>(value >> (8 * i));
  }
}

uint64_t GetBigEndian(const uint8_t* in, size_t width) {
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) value = (value << 8) | in[i];
  return value;
}

// The magic is shown as hex: a wrong peer (HTTP, TLS, an older version) is
// recognisable from it, and arbitrary bytes must not reach a log line raw.
std::string MagicHex(const uint8_t* bytes) {
  return ToHex(std::string_view(reinterpret_cast<const char*>(bytes), sizeof(kMagic)));
}

}  // namespace

std::array<uint8_t, kPrefixLen> EncodePrefix(const FramePrefix& prefix) {
  std::array<uint8_t, kPrefixLen> bytes{};
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  PutBigEndian(prefix.header_len, 4, bytes.data() + 4);
  PutBigEndian(prefix.payload_len, 8, bytes.data() + 8);
  return bytes;
}

Status DecodePrefix(const uint8_t (&bytes)[kPrefixLen], FramePrefix* out) {
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    return Status::FieldViolation("magic", "must be " + MagicHex(kMagic) + " (\"KVP1\"), got " + MagicHex(bytes));
  }
  const uint64_t header_len = GetBigEndian(bytes + 4, 4);
  if (header_len < kMinHeaderLen || header_len > kMaxHeaderLen) {
    return Status::FieldViolation("header_len", "must be " + std::to_string(kMinHeaderLen) +
                                                    " ..= " + std::to_string(kMaxHeaderLen) + ", got " +
                                                    std::to_string(header_len));
  }
  const uint64_t payload_len = GetBigEndian(bytes + 8, 8);
  if (payload_len > kMaxPayloadLen) {
    return Status::FieldViolation(
        "payload_len", "must be 0 ..= " + std::to_string(kMaxPayloadLen) + ", got " + std::to_string(payload_len));
  }
  out->header_len = static_cast<uint32_t>(header_len);
  out->payload_len = payload_len;
  return Status::Ok();
}

std::string EncodeFrame(const Message& message, uint64_t payload_len) {
  // The header is written in place after room for the prefix, which is
  // filled in once the header's length is known.
  std::string frame(kPrefixLen, '\0');
  AppendHeader(message, &frame);
  // Even a message at every list and string limit encodes to far less than
  // 4 GiB, so the cast cannot truncate; a header above kMaxHeaderLen is the
  // caller's bug and the peer rejects it.
  const auto prefix = EncodePrefix({static_cast<uint32_t>(frame.size() - kPrefixLen), payload_len});
  std::memcpy(frame.data(), prefix.data(), prefix.size());
  return frame;
}

}  // namespace kvpeer::protocol
