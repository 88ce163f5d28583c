#include "protocol/codec.h"

#include <array>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parser.hpp>
#include <boost/json/serialize.hpp>

#include "base/hex.h"
#include "protocol/internal/header_writer.h"
#include "protocol/json_fields.h"
#include "protocol/limits.h"
#include "protocol/type_names.h"

namespace kvpeer::protocol {
namespace {

namespace json = boost::json;

// Deeper nesting than this can only come from junk in ignored fields; the
// limit bounds the parser's stack use on a hostile 16 MiB header.
constexpr size_t kMaxJsonDepth = 64;

// ---------------------------------------------------------------- encoding

void EncodeFields(const Connect& m, json::object& o) {
  o["peer_id"] = m.peer_id;
  o["wire_major"] = m.wire_major;
  o["wire_minor"] = m.wire_minor;
  o["epoch"] = m.epoch;
  o["block_len"] = m.block_len;
  o["config_fingerprint"] = m.config_fingerprint;
  o["hash_seed"] = m.hash_seed;
  o["nonce"] = m.nonce;
  json::array features;
  for (const std::string& feature : m.features) features.emplace_back(feature);
  o["features"] = std::move(features);
}

void EncodeFields(const ConnectAck& m, json::object& o) {
  o["peer_id"] = m.peer_id;
  o["wire_major"] = m.wire_major;
  o["wire_minor"] = m.wire_minor;
  o["epoch"] = m.epoch;
  if (m.proof) o["proof"] = *m.proof;
}

void EncodeFields(const Disconnect& m, json::object& o) {
  if (m.reason) o["reason"] = *m.reason;
}

void EncodeFields(const Ping& m, json::object& o) { o["nonce"] = m.nonce; }

void EncodeFields(const Pong& m, json::object& o) { o["nonce"] = m.nonce; }

void EncodeFields(const TransferDone& m, json::object& o) {
  o["kv_request_id"] = m.kv_request_id;
  o["success"] = m.success;
  o["round_seq"] = m.round_seq;
}

void EncodeFields(const AbortFetch& m, json::object& o) {
  o["kv_request_id"] = m.kv_request_id;
  o["round_seq"] = m.round_seq;
}

void EncodeFields(const AbortAck& m, json::object& o) {
  o["kv_request_id"] = m.kv_request_id;
  o["round_seq"] = m.round_seq;
}

void EncodeFields(const Unknown&, json::object&) {}  // only its type

// ---------------------------------------------------------------- decoding
//
// One DecodeFields per message lists its fields in spec order with their
// rules; the rules themselves live in FieldReader.

void DecodeFields(FieldReader& r, Connect* m) {
  r.ReadPeerId("peer_id", &m->peer_id);
  // Only type and range here: the session compares the versions, so that a
  // mismatch gets its own disconnect reason naming both values.
  r.ReadInteger("wire_major", kAnyUint64Rule, &m->wire_major);
  r.ReadInteger("wire_minor", kAnyUint64Rule, &m->wire_minor);
  r.ReadToken("epoch", TokenRule::kNotAllZeros, &m->epoch);
  r.ReadInteger("block_len", kBlockLenRule, &m->block_len);
  r.ReadString("config_fingerprint", kFreeStringRule, &m->config_fingerprint);
  r.ReadString("hash_seed", kIdStringRule, &m->hash_seed);
  r.ReadToken("nonce", TokenRule::kAnyValue, &m->nonce);
  // Unknown feature names are kept here and ignored by the negotiation
  // (only names both ends list are on); the shape is checked strictly.
  r.ReadOptionalStrings("features", kMaxFeatures, kFeatureNameRule, &m->features);
}

void DecodeFields(FieldReader& r, ConnectAck* m) {
  r.ReadPeerId("peer_id", &m->peer_id);
  r.ReadInteger("wire_major", kAnyUint64Rule, &m->wire_major);
  r.ReadInteger("wire_minor", kAnyUint64Rule, &m->wire_minor);
  r.ReadToken("epoch", TokenRule::kNotAllZeros, &m->epoch);
  // Any string: a proof of the wrong length or case is a wrong proof, which
  // the session answers with "authentication failed" (spec section 5,
  // docs/wire-protocol.md 9(d)); only a non-string is a frame violation.
  r.ReadOptionalString("proof", kAnyStringRule, &m->proof);
}

void DecodeFields(FieldReader& r, Disconnect* m) { r.ReadOptionalString("reason", kFreeStringRule, &m->reason); }

void DecodeFields(FieldReader& r, Ping* m) { r.ReadToken("nonce", TokenRule::kAnyValue, &m->nonce); }

void DecodeFields(FieldReader& r, Pong* m) { r.ReadToken("nonce", TokenRule::kAnyValue, &m->nonce); }

void DecodeFields(FieldReader& r, Lookup* m) {
  r.ReadString("kv_request_id", kIdStringRule, &m->kv_request_id);
  r.ReadKeys("keys", &m->keys);
  r.ReadInteger("round_seq", kAnyUint64Rule, &m->round_seq);
}

void DecodeFields(FieldReader& r, LookupResp* m) {
  r.ReadString("kv_request_id", kIdStringRule, &m->kv_request_id);
  r.ReadKeys("keys", &m->keys);
  r.ReadBools("hits", &m->hits);
  r.RequireSameLength("hits", m->hits.size(), "keys", m->keys.size());
  r.ReadInteger("round_seq", kAnyUint64Rule, &m->round_seq);
}

void DecodeFields(FieldReader& r, Fetch* m) {
  r.ReadString("kv_request_id", kIdStringRule, &m->kv_request_id);
  r.ReadKeys("keys", &m->keys);
  r.ReadSlotIndexes("block_indexes", 0, &m->block_indexes);
  r.RequireSameLength("block_indexes", m->block_indexes.size(), "keys", m->keys.size());
  r.ReadInteger("round_seq", kAnyUint64Rule, &m->round_seq);
}

void DecodeFields(FieldReader& r, BlockData* m) {
  r.ReadString("kv_request_id", kIdStringRule, &m->kv_request_id);
  r.ReadInteger("round_seq", kAnyUint64Rule, &m->round_seq);
  r.ReadSlotIndexes("block_indexes", 1, &m->block_indexes);
  r.ReadOptionalChecksums("xxh3", m->block_indexes.size(), &m->xxh3);
}

void DecodeFields(FieldReader& r, TransferDone* m) {
  r.ReadString("kv_request_id", kIdStringRule, &m->kv_request_id);
  r.ReadBool("success", &m->success);
  r.ReadInteger("round_seq", kAnyUint64Rule, &m->round_seq);
}

void DecodeFields(FieldReader& r, AbortFetch* m) {
  r.ReadString("kv_request_id", kIdStringRule, &m->kv_request_id);
  r.ReadInteger("round_seq", kAnyUint64Rule, &m->round_seq);
}

void DecodeFields(FieldReader& r, AbortAck* m) {
  r.ReadString("kv_request_id", kIdStringRule, &m->kv_request_id);
  r.ReadInteger("round_seq", kAnyUint64Rule, &m->round_seq);
}

template <typename T>
Status DecodeAs(const json::object& header, std::string_view type, Message* out) {
  T message;
  FieldReader reader(header, type);
  DecodeFields(reader, &message);
  if (!reader.status().ok()) return reader.status();
  *out = std::move(message);
  return Status::Ok();
}

using DecodeFn = Status (*)(const json::object&, std::string_view, Message*);

// Indexed like kKnownTypeNames: entry i decodes alternative i of Message.
template <size_t... I>
constexpr std::array<DecodeFn, sizeof...(I)> MakeDecoders(std::index_sequence<I...>) {
  return {&DecodeAs<std::variant_alternative_t<I, Message>>...};
}
constexpr auto kDecoders = MakeDecoders(std::make_index_sequence<kKnownTypeNames.size()>());

// The position of alternative T in Message.
template <typename T, size_t I = 0>
constexpr size_t AlternativeIndex() {
  if constexpr (std::is_same_v<std::variant_alternative_t<I, Message>, T>) {
    return I;
  } else {
    return AlternativeIndex<T, I + 1>();
  }
}
constexpr size_t kBlockDataIndex = AlternativeIndex<BlockData>();

std::optional<size_t> FindKnownType(std::string_view type) {
  for (size_t i = 0; i < kKnownTypeNames.size(); ++i) {
    if (kKnownTypeNames[i] == type) return i;
  }
  return std::nullopt;
}

// Parses with error codes only. Allocation failure (std::bad_alloc) is the
// one exception that can still leave, as anywhere else in the daemon. The
// tree is built in out's storage so the final move does not copy it.
Status ParseJson(std::string_view text, json::value* out) {
  json::parse_options options;
  options.max_depth = kMaxJsonDepth;
  json::parser parser(json::storage_ptr(), options);
  parser.reset(out->storage());
  json::error_code error;
  const size_t consumed = parser.write(text.data(), text.size(), error);
  if (error) {
    return Status::FieldViolation("header",
                                  "must be valid JSON: " + error.message() + " near byte " + std::to_string(consumed));
  }
  *out = parser.release();  // cannot throw: write() completed a value
  return Status::Ok();
}

// Only block_data carries a payload (spec section 2).
Status CheckControlPayload(size_t type_index, uint64_t payload_len) {
  if (type_index == kBlockDataIndex || payload_len == 0) return Status::Ok();
  return Status::FieldViolation(std::string(kKnownTypeNames[type_index]) + ".payload_len",
                                "must be 0 (only block_data carries a payload), is " + std::to_string(payload_len));
}

Status CheckBlockDataPayload(const BlockData& message, uint64_t payload_len, const DecodeContext& context) {
  if (context.block_len == 0) return Status::Ok();      // block_len not known yet
  const uint64_t count = message.block_indexes.size();  // >= 1, checked by the decoder
  // count <= 65536 but the context's block_len is unbounded: multiply only
  // when the product fits; otherwise it cannot equal any payload_len.
  const bool fits = context.block_len <= std::numeric_limits<uint64_t>::max() / count;
  if (fits && count * context.block_len == payload_len) return Status::Ok();
  const std::string product = fits ? " = " + std::to_string(count * context.block_len) : "";
  return Status::FieldViolation("block_data.payload_len",
                                "must be len(block_indexes) * block_len = " + std::to_string(count) + " * " +
                                    std::to_string(context.block_len) + product + ", is " +
                                    std::to_string(payload_len));
}

}  // namespace

std::string EncodeHeader(const Message& message) {
  std::string text;
  AppendHeader(message, &text);
  return text;
}

void AppendHeader(const Message& message, std::string* out) {
  std::visit(
      [&message, out](const auto& m) {
        // The messages whose headers grow with their lists have a writer of
        // their own (internal/header_writer.h): no json::object for them.
        if constexpr (requires { internal::WriteHeader(m, out); }) {
          internal::WriteHeader(m, out);
        } else {
          json::object header;
          header["type"] = TypeName(message);
          EncodeFields(m, header);
          out->append(json::serialize(header));
        }
      },
      message);
}

Status DecodeHeader(std::string_view header_json, uint64_t payload_len, const DecodeContext& context, Message* out) {
  // The parsed tree lives only for this call: a monotonic arena makes its
  // many small allocations cheap and frees them at once.
  json::monotonic_resource arena;
  json::value root(&arena);
  if (Status status = ParseJson(header_json, &root); !status.ok()) return status;

  const json::object* header = root.if_object();
  if (header == nullptr) {
    return Status::FieldViolation("header", "must be a JSON object, not " + std::string(JsonKindName(root)));
  }
  const json::value* type_value = header->if_contains("type");
  if (type_value == nullptr) return Status::FieldViolation("type", "is required");
  const json::string* type = type_value->if_string();
  if (type == nullptr) {
    return Status::FieldViolation("type", "must be a string, not " + std::string(JsonKindName(*type_value)));
  }

  const std::optional<size_t> type_index = FindKnownType(*type);
  if (!type_index) {
    // Forward compatibility: the caller skips the payload and counts it.
    *out = Unknown{std::string(type->data(), type->size())};
    return Status::Ok();
  }
  // Checked before the fields: the rule does not depend on them.
  if (Status status = CheckControlPayload(*type_index, payload_len); !status.ok()) return status;
  if (Status status = kDecoders[*type_index](*header, *type, out); !status.ok()) return status;
  if (const auto* block_data = std::get_if<BlockData>(out)) {
    return CheckBlockDataPayload(*block_data, payload_len, context);
  }
  return Status::Ok();
}

std::string ChecksumHex(uint64_t checksum) {
  std::string hex;
  AppendChecksumHex(checksum, &hex);
  return hex;
}

void AppendChecksumHex(uint64_t checksum, std::string* out) {
  static_assert(kChecksumHexDigits == 2 * sizeof checksum);
  for (int shift = 56; shift >= 0; shift -= 8) AppendHexByte(static_cast<unsigned char>(checksum >> shift), out);
}

}  // namespace kvpeer::protocol
