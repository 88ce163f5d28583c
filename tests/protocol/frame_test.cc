#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <string>

#include "protocol/codec.h"
#include "protocol/frame.h"

namespace kvpeer::protocol {
namespace {

Status DecodeArray(const std::array<uint8_t, kPrefixLen>& bytes, FramePrefix* out) {
  uint8_t raw[kPrefixLen];
  std::memcpy(raw, bytes.data(), kPrefixLen);
  return DecodePrefix(raw, out);
}

Status DecodeLengths(uint64_t header_len, uint64_t payload_len) {
  // header_len is written by hand: EncodePrefix cannot express values above
  // what a u32 holds, and the tests want to see exactly the wire bytes.
  std::array<uint8_t, kPrefixLen> bytes = EncodePrefix({0, payload_len});
  for (int i = 0; i < 4; ++i) bytes[4 + i] = static_cast<uint8_t>(header_len >> (24 - 8 * i));
  FramePrefix out;
  return DecodeArray(bytes, &out);
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("frame prefix: encode then decode returns the same lengths", "[frame]") {
  const FramePrefix cases[] = {{2, 0}, {1234, 5678}, {0x00fedcba, 0x0000000003020100}, {kMaxHeaderLen, kMaxPayloadLen}};
  for (const FramePrefix& prefix : cases) {
    FramePrefix decoded;
    REQUIRE(DecodeArray(EncodePrefix(prefix), &decoded).ok());
    CHECK(decoded.header_len == prefix.header_len);
    CHECK(decoded.payload_len == prefix.payload_len);
  }
}

TEST_CASE("frame prefix: encoding is the magic then big-endian lengths", "[frame]") {
  const auto bytes = EncodePrefix({0x01020304, 0x05060708090a0b0c});
  const std::array<uint8_t, kPrefixLen> expected = {'K', 'V', 'P', '1', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CHECK(bytes == expected);
}

TEST_CASE("frame prefix: header_len accepted at 2 and 16 MiB, rejected at 1 and 16 MiB + 1", "[frame]") {
  CHECK(DecodeLengths(2, 0).ok());
  CHECK(DecodeLengths(kMaxHeaderLen, 0).ok());

  for (const uint64_t bad : {uint64_t{0}, uint64_t{1}, uint64_t{kMaxHeaderLen} + 1, uint64_t{0xffffffff}}) {
    const Status status = DecodeLengths(bad, 0);
    INFO("header_len " << bad << ": " << status.message());
    CHECK(status.code() == Status::Code::kViolation);
    CHECK(Contains(status.message(), "header_len"));
    CHECK(Contains(status.message(), "16777216"));
    CHECK(Contains(status.message(), "got " + std::to_string(bad)));
  }
}

TEST_CASE("frame prefix: payload_len accepted at 64 MiB, rejected at 64 MiB + 1", "[frame]") {
  CHECK(DecodeLengths(2, 0).ok());
  CHECK(DecodeLengths(2, kMaxPayloadLen).ok());

  for (const uint64_t bad : {kMaxPayloadLen + 1, std::numeric_limits<uint64_t>::max()}) {
    const Status status = DecodeLengths(2, bad);
    INFO("payload_len " << bad << ": " << status.message());
    CHECK(status.code() == Status::Code::kViolation);
    CHECK(Contains(status.message(), "payload_len"));
    CHECK(Contains(status.message(), "67108864"));
    CHECK(Contains(status.message(), "got " + std::to_string(bad)));
  }
}

TEST_CASE("frame prefix: a wrong magic is rejected and shown as hex", "[frame]") {
  auto bytes = EncodePrefix({2, 0});
  std::memcpy(bytes.data(), "GET ", 4);
  FramePrefix out;
  const Status status = DecodeArray(bytes, &out);
  CHECK(status.code() == Status::Code::kViolation);
  CHECK(Contains(status.message(), "magic"));
  CHECK(Contains(status.message(), "4b565031"));  // expected "KVP1"
  CHECK(Contains(status.message(), "47455420"));  // actual "GET "

  bytes[0] = 'K';
  bytes[1] = 'V';
  bytes[2] = 'P';
  bytes[3] = '2';  // a future major version is not this protocol
  CHECK(DecodeArray(bytes, &out).code() == Status::Code::kViolation);
}

TEST_CASE("frame prefix: magic is checked before the lengths", "[frame]") {
  auto bytes = EncodePrefix({1, kMaxPayloadLen + 1});
  bytes[0] = 'X';
  FramePrefix out;
  CHECK(Contains(DecodeArray(bytes, &out).message(), "magic"));
}

TEST_CASE("EncodeFrame: prefix announces the header JSON and the payload length", "[frame]") {
  const Message message = Ping{"00112233445566778899aabbccddeeff"};
  const std::string header = EncodeHeader(message);
  const std::string frame = EncodeFrame(message, 0);
  REQUIRE(frame.size() == kPrefixLen + header.size());
  CHECK(frame.substr(kPrefixLen) == header);

  uint8_t raw[kPrefixLen];
  std::memcpy(raw, frame.data(), kPrefixLen);
  FramePrefix prefix;
  REQUIRE(DecodePrefix(raw, &prefix).ok());
  CHECK(prefix.header_len == header.size());
  CHECK(prefix.payload_len == 0);

  const std::string with_payload = EncodeFrame(BlockData{"r", 1, {0, 1}}, 32);
  std::memcpy(raw, with_payload.data(), kPrefixLen);
  REQUIRE(DecodePrefix(raw, &prefix).ok());
  CHECK(prefix.payload_len == 32);
}

}  // namespace kvpeer::protocol
