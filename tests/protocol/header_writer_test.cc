// The bulky headers (protocol/internal/header_writer.h) are written straight
// into text: each must be exactly the text boost::json::serialize makes of
// the object the codec used to build (same field order, same escaping), so
// the change is invisible on the wire.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "base/hex.h"
#include "protocol/codec.h"
#include "protocol/frame.h"
#include "protocol/frame_decoder.h"

namespace kvpeer::protocol {
namespace {

namespace json = boost::json;

// kv_request_ids that need every kind of escaping, and plain ones.
const std::vector<std::string> kRequestIds = {
    "r", "req-1", "quote\" back\\slash", "tab\tnew\nline\x01\x1f del\x7f", "caf\xc3\xa9 \xe2\x82\xac / </script>",
};

json::array Keys(const std::vector<Key>& keys) {
  json::array array;
  for (const Key& key : keys) array.emplace_back(ToHex(key));
  return array;
}

json::array Indexes(const std::vector<SlotIndex>& indexes) {
  json::array array;
  for (SlotIndex index : indexes) array.emplace_back(static_cast<uint64_t>(index));
  return array;
}

const std::vector<Key> kKeys = {std::string("\x00\x01\xfe\xff", 4), "abc", std::string(36, '\x9c')};
const std::vector<SlotIndex> kIndexes = {0, 7, 2147483647};
constexpr RoundSeq kRounds[] = {0, 1, 18446744073709551615ull};

TEST_CASE("header writer: lookup and lookup_resp are the object path's text", "[header_writer]") {
  for (const std::string& kv : kRequestIds) {
    for (RoundSeq round : kRounds) {
      json::object lookup{{"type", "lookup"}};
      lookup["kv_request_id"] = kv;
      lookup["keys"] = Keys(kKeys);
      lookup["round_seq"] = round;
      CHECK(EncodeHeader(Lookup{kv, kKeys, round}) == json::serialize(lookup));

      const std::vector<bool> hits = {true, false, true};
      json::object resp{{"type", "lookup_resp"}};
      resp["kv_request_id"] = kv;
      resp["keys"] = Keys(kKeys);
      resp["hits"] = json::array{true, false, true};
      resp["round_seq"] = round;
      CHECK(EncodeHeader(LookupResp{kv, kKeys, hits, round}) == json::serialize(resp));
    }
  }
  json::object empty{{"type", "lookup"}};
  empty["kv_request_id"] = "r";
  empty["keys"] = json::array();
  empty["round_seq"] = 3;
  CHECK(EncodeHeader(Lookup{"r", {}, 3}) == json::serialize(empty));
}

TEST_CASE("header writer: fetch and block_data are the object path's text", "[header_writer]") {
  for (const std::string& kv : kRequestIds) {
    json::object fetch{{"type", "fetch"}};
    fetch["kv_request_id"] = kv;
    fetch["keys"] = Keys(kKeys);
    fetch["block_indexes"] = Indexes(kIndexes);
    fetch["round_seq"] = kRounds[2];
    CHECK(EncodeHeader(Fetch{kv, kKeys, kIndexes, kRounds[2]}) == json::serialize(fetch));

    BlockData data{kv, kRounds[1], kIndexes};
    json::object plain{{"type", "block_data"}};
    plain["kv_request_id"] = kv;
    plain["round_seq"] = kRounds[1];
    plain["block_indexes"] = Indexes(kIndexes);
    CHECK(EncodeHeader(data) == json::serialize(plain));  // no xxh3 unless valid

    data.xxh3.state = BlockChecksums::State::kValid;
    data.xxh3.values = {0, 0x0123456789abcdefull, 0xffffffffffffffffull};
    json::object summed = plain;
    summed["xxh3"] = json::array{"0000000000000000", "0123456789abcdef", "ffffffffffffffff"};
    CHECK(EncodeHeader(data) == json::serialize(summed));
  }
}

TEST_CASE("header writer: a written frame decodes to the message it was made of", "[header_writer]") {
  const Fetch fetch{"quote\" id", kKeys, kIndexes, 42};
  const std::string frame = EncodeFrame(fetch, 0);
  FrameDecoder decoder;
  CHECK(decoder.Feed(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(frame.data()), frame.size())) ==
        frame.size());
  REQUIRE(decoder.state() == FrameDecoder::State::kFrameReady);
  CHECK(decoder.message() == Message{fetch});
}

}  // namespace
}  // namespace kvpeer::protocol
