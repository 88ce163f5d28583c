// The twelve messages of wire protocol 1.1 as typed structs.
//
// A struct holds exactly what the wire carries, already validated: keys are
// raw bytes here (hex exists only on the wire), integers are in range and
// parallel arrays have equal length. Encoding and decoding live in codec.h.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kvpeer::protocol {

// A block key: opaque bytes (1 ..= 4096 of them). std::string is used as a
// byte container so keys hash and compare cheaply; it is never printed raw.
using Key = std::string;
using SlotIndex = uint32_t;  // 0 ..= 2^31 - 1
using RoundSeq = uint64_t;

struct Connect {
  std::string peer_id;  // HOST:PORT, syntax checked (peer_id.h)
  uint64_t wire_major = 1;
  uint64_t wire_minor = 1;
  std::string epoch;  // 32 lowercase hex digits, never all zeros
  uint64_t block_len = 0;
  std::string config_fingerprint;
  std::string hash_seed;
  std::string nonce;  // 32 lowercase hex digits
  // Optional on the wire (absent = none): the features the sender supports,
  // at most 16 names of 1 ..= 64 characters (spec sections 3 and 7). Always
  // encoded, possibly empty; a 1.0 peer ignores it as an unknown field.
  std::vector<std::string> features;
  bool operator==(const Connect&) const = default;
};

struct ConnectAck {
  std::string peer_id;
  uint64_t wire_major = 1;
  uint64_t wire_minor = 1;
  std::string epoch;                 // the sender's own epoch
  std::optional<std::string> proof;  // lowercase hex HMAC-SHA256, when a PSK is configured
  bool operator==(const ConnectAck&) const = default;
};

struct Disconnect {
  std::optional<std::string> reason;
  bool operator==(const Disconnect&) const = default;
};

struct Ping {
  std::string nonce;
  bool operator==(const Ping&) const = default;
};

struct Pong {
  std::string nonce;
  bool operator==(const Pong&) const = default;
};

struct Lookup {
  std::string kv_request_id;
  std::vector<Key> keys;
  RoundSeq round_seq = 0;
  bool operator==(const Lookup&) const = default;
};

struct LookupResp {
  std::string kv_request_id;
  std::vector<Key> keys;
  std::vector<bool> hits;  // same length as keys
  RoundSeq round_seq = 0;
  bool operator==(const LookupResp&) const = default;
};

struct Fetch {
  std::string kv_request_id;
  std::vector<Key> keys;
  std::vector<SlotIndex> block_indexes;  // same length as keys
  RoundSeq round_seq = 0;
  bool operator==(const Fetch&) const = default;
};

// block_data.xxh3 (spec section 7): one XXH3-64 per block. The decoder cannot
// know whether the feature is on for the connection, so it records what the
// header held and the session decides: with the feature on anything but
// kValid is a violation, with it off the field is ignored whatever it holds.
struct BlockChecksums {
  enum class State { kAbsent, kValid, kMalformed };
  State state = State::kAbsent;
  std::vector<uint64_t> values;  // one per block, when kValid
  std::string problem;           // what was wrong, when kMalformed ("xxh3[2]: ...")
  bool operator==(const BlockChecksums&) const = default;

  static BlockChecksums Of(std::vector<uint64_t> values) {
    return BlockChecksums{State::kValid, std::move(values), {}};
  }
  bool valid() const { return state == State::kValid; }
};

// The header of a block_data frame. Its payload (block_indexes.size() *
// block_len bytes) travels separately so it can be read straight into, and
// written straight from, the blocks' memory.
struct BlockData {
  std::string kv_request_id;
  RoundSeq round_seq = 0;
  std::vector<SlotIndex> block_indexes;  // destination slots, 1 or more
  BlockChecksums xxh3{};                 // encoded only when valid
  bool operator==(const BlockData&) const = default;
};

struct TransferDone {
  std::string kv_request_id;
  bool success = false;
  RoundSeq round_seq = 0;
  bool operator==(const TransferDone&) const = default;
};

struct AbortFetch {
  std::string kv_request_id;
  RoundSeq round_seq = 0;
  bool operator==(const AbortFetch&) const = default;
};

struct AbortAck {
  std::string kv_request_id;
  RoundSeq round_seq = 0;
  bool operator==(const AbortAck&) const = default;
};

// A frame whose `type` this implementation does not know: ignored and
// counted, never fatal (forward compatibility).
struct Unknown {
  std::string type;
  bool operator==(const Unknown&) const = default;
};

using Message = std::variant<Connect, ConnectAck, Disconnect, Ping, Pong, Lookup, LookupResp, Fetch, BlockData,
                             TransferDone, AbortFetch, AbortAck, Unknown>;

// The wire `type` string of a message ("connect", "block_data", ...).
std::string_view TypeName(const Message& message);

}  // namespace kvpeer::protocol
