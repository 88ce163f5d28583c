#include "protocol/internal/header_writer.h"

#include <charconv>
#include <string_view>
#include <type_traits>
#include <variant>

#include <boost/json/serialize.hpp>
#include <boost/json/string_view.hpp>

#include "base/hex.h"
#include "protocol/codec.h"
#include "protocol/type_names.h"

namespace kvpeer::protocol::internal {
namespace {

// The wire name of message type T, from the one table (type_names.h).
template <typename T, size_t I = 0>
constexpr std::string_view NameOf() {
  if constexpr (std::is_same_v<std::variant_alternative_t<I, Message>, T>) {
    return kKnownTypeNames[I];
  } else {
    return NameOf<T, I + 1>();
  }
}

// A string from outside (kv_request_id) may hold anything: boost::json's own
// escaping, so the text is the one the object path made.
void AppendString(std::string_view text, std::string* out) {
  out->append(boost::json::serialize(boost::json::string_view(text.data(), text.size())));
}

void AppendUint(uint64_t value, std::string* out) {
  char digits[20];
  const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out->append(digits, end);
}

void AppendName(std::string_view name, std::string* out) {
  out->push_back('"');
  out->append(name);
  out->append("\":");
}

// `{"type":"<type>","kv_request_id":<id>` (the start of every message here).
void Begin(std::string_view type, const std::string& kv_request_id, std::string* out) {
  out->append("{\"type\":\"");
  out->append(type);
  out->append("\",");
  AppendName("kv_request_id", out);
  AppendString(kv_request_id, out);
}

// Keys are hex: nothing in them needs escaping. The list's length is known
// before it is written, so the string grows once and the digits go straight
// into it (a lookup_resp may hold 65,536 keys).
void AppendKeys(const std::vector<Key>& keys, std::string* out) {
  out->push_back(',');
  AppendName("keys", out);
  size_t length = 2;                                         // [ and ]
  for (const Key& key : keys) length += 2 * key.size() + 3;  // "hex" and a comma
  const size_t start = out->size();
  out->resize(start + length);
  char* at = out->data() + start;
  *at++ = '[';
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) *at++ = ',';
    *at++ = '"';
    at = WriteHex(keys[i], at);
    *at++ = '"';
  }
  *at++ = ']';
  out->resize(static_cast<size_t>(at - out->data()));  // one comma fewer than counted
}

// `,"name":[item,item,...]`, each item written by append_item(i, out).
template <typename AppendItem>
void AppendList(std::string_view name, size_t count, std::string* out, AppendItem append_item) {
  out->push_back(',');
  AppendName(name, out);
  out->push_back('[');
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out->push_back(',');
    append_item(i, out);
  }
  out->push_back(']');
}

void AppendIndexes(const std::vector<SlotIndex>& indexes, std::string* out) {
  AppendList("block_indexes", indexes.size(), out, [&](size_t i, std::string* o) { AppendUint(indexes[i], o); });
}

// One checksum as the wire writes it: its 16 hex digits, in quotes.
void AppendXxh3(uint64_t value, std::string* out) {
  out->push_back('"');
  AppendChecksumHex(value, out);
  out->push_back('"');
}

void AppendRoundSeq(RoundSeq round_seq, std::string* out) {
  out->push_back(',');
  AppendName("round_seq", out);
  AppendUint(round_seq, out);
}

}  // namespace

void WriteHeader(const Lookup& m, std::string* out) {
  Begin(NameOf<Lookup>(), m.kv_request_id, out);
  AppendKeys(m.keys, out);
  AppendRoundSeq(m.round_seq, out);
  out->push_back('}');
}

void WriteHeader(const LookupResp& m, std::string* out) {
  Begin(NameOf<LookupResp>(), m.kv_request_id, out);
  AppendKeys(m.keys, out);
  AppendList("hits", m.hits.size(), out, [&](size_t i, std::string* o) { o->append(m.hits[i] ? "true" : "false"); });
  AppendRoundSeq(m.round_seq, out);
  out->push_back('}');
}

void WriteHeader(const Fetch& m, std::string* out) {
  Begin(NameOf<Fetch>(), m.kv_request_id, out);
  AppendKeys(m.keys, out);
  AppendIndexes(m.block_indexes, out);
  AppendRoundSeq(m.round_seq, out);
  out->push_back('}');
}

void WriteHeader(const BlockData& m, std::string* out) {
  Begin(NameOf<BlockData>(), m.kv_request_id, out);
  AppendRoundSeq(m.round_seq, out);
  AppendIndexes(m.block_indexes, out);
  if (m.xxh3.valid()) {
    AppendList("xxh3", m.xxh3.values.size(), out, [&](size_t i, std::string* o) { AppendXxh3(m.xxh3.values[i], o); });
  }
  out->push_back('}');
}

}  // namespace kvpeer::protocol::internal
