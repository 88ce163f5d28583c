// Shared fixtures for the codec tests: one valid instance of every message,
// and helpers that take its encoded header and change a single field, so
// each test states only the rule it exercises.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "protocol/codec.h"
#include "protocol/messages.h"
#include "base/status.h"

namespace kvpeer::protocol::testing {

inline const std::string kEpoch = "0123456789abcdef0123456789abcdef";
inline const std::string kNonce = "fedcba9876543210fedcba9876543210";
inline constexpr uint64_t kBlockLen = 4096;

inline Connect ValidConnect() {
  return Connect{"10.0.0.1:7000", 1, 1, kEpoch, kBlockLen, "model-a/fp16", "seed-42", kNonce, {"xxh3"}};
}
inline ConnectAck ValidConnectAck() { return ConnectAck{"10.0.0.2:7000", 1, 1, kEpoch, std::nullopt}; }
inline Disconnect ValidDisconnect() { return Disconnect{std::string("shutting down")}; }
inline Ping ValidPing() { return Ping{kNonce}; }
inline Pong ValidPong() { return Pong{kNonce}; }
inline Lookup ValidLookup() { return Lookup{"req-1", {"\x01\x02", "\xff", "abc"}, 7}; }
inline LookupResp ValidLookupResp() { return LookupResp{"req-1", {"\x01\x02", "\xff", "abc"}, {true, false, true}, 7}; }
inline Fetch ValidFetch() { return Fetch{"req-1", {"\x01\x02", "\xff", "abc"}, {0, 5, 9}, 8}; }
inline BlockData ValidBlockData() { return BlockData{"req-1", 8, {0, 5, 9}}; }
inline TransferDone ValidTransferDone() { return TransferDone{"req-1", true, 8}; }
inline AbortFetch ValidAbortFetch() { return AbortFetch{"req-1", 8}; }
inline AbortAck ValidAbortAck() { return AbortAck{"req-1", 8}; }

// Every known message, valid, for tests that sweep all types.
inline std::vector<Message> AllValidKnownMessages() {
  return {ValidConnect(),   ValidConnectAck(),   ValidDisconnect(), ValidPing(),
          ValidPong(),      ValidLookup(),       ValidLookupResp(), ValidFetch(),
          ValidBlockData(), ValidTransferDone(), ValidAbortFetch(), ValidAbortAck()};
}

// The payload a valid frame of `message` carries with block_len kBlockLen.
inline uint64_t ValidPayloadLen(const Message& message) {
  if (const auto* block_data = std::get_if<BlockData>(&message)) {
    return block_data->block_indexes.size() * kBlockLen;
  }
  return 0;
}

inline boost::json::object HeaderObject(const Message& message) {
  return boost::json::parse(EncodeHeader(message)).as_object();
}

// `message`'s header with `field` set to `value`.
inline std::string HeaderWith(const Message& message, std::string_view field, boost::json::value value) {
  boost::json::object header = HeaderObject(message);
  header[field] = std::move(value);
  return boost::json::serialize(header);
}

// `message`'s header without `field`.
inline std::string HeaderWithout(const Message& message, std::string_view field) {
  boost::json::object header = HeaderObject(message);
  header.erase(field);
  return boost::json::serialize(header);
}

inline Status Decode(std::string_view json, uint64_t payload_len = 0, uint64_t block_len = 0, Message* out = nullptr) {
  Message scratch;
  return DecodeHeader(json, payload_len, DecodeContext{block_len}, out != nullptr ? out : &scratch);
}

// Decodes `json` as a frame of `message`'s type with a payload valid for it.
inline Status DecodeLike(const Message& message, std::string_view json) {
  return Decode(json, ValidPayloadLen(message), kBlockLen);
}

// Asserts a violation whose message names `field` first, as
// Status::FieldViolation formats it ("field: rule").
#define REQUIRE_FIELD_VIOLATION(status_expr, field)                                      \
  do {                                                                                   \
    const ::kvpeer::Status decode_status = (status_expr);                                \
    INFO("status message: " << decode_status.message());                                 \
    REQUIRE(decode_status.code() == ::kvpeer::Status::Code::kViolation);                 \
    REQUIRE_THAT(decode_status.message(), Catch::StartsWith(std::string(field) + ": ")); \
  } while (false)

#define REQUIRE_DECODES(status_expr)                      \
  do {                                                    \
    const ::kvpeer::Status decode_status = (status_expr); \
    INFO("status message: " << decode_status.message());  \
    REQUIRE(decode_status.ok());                          \
  } while (false)

inline std::string Repeat(std::string_view unit, size_t count) {
  std::string text;
  text.reserve(unit.size() * count);
  for (size_t i = 0; i < count; ++i) text += unit;
  return text;
}

}  // namespace kvpeer::protocol::testing
