// Codec: every row of the spec's field rules (section 2) and the per-message
// rules of section 3, each accepted at its limit and rejected one past it.
#include <limits>
#include <string>

#include <catch2/catch.hpp>

#include "protocol/codec.h"
#include "protocol/json_fields.h"
#include "protocol/limits.h"
#include "protocol/messages.h"
#include "protocol/peer_id.h"
#include "tests/protocol/codec_test_util.h"

namespace kvpeer::protocol {
namespace {

using boost::json::array;
using boost::json::value;
using testing::Decode;
using testing::DecodeLike;
using testing::HeaderWith;
using testing::kBlockLen;
using testing::kEpoch;
using testing::kNonce;
using testing::Repeat;

const uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();

// "é" is two bytes of UTF-8 but one character.
const std::string kTwoByteChar = "\xc3\xa9";

// Every (message, field) that carries a string with the common id rule
// (1 ..= 4096 characters). peer_id has its own syntax (see below).
std::vector<std::pair<Message, std::string>> IdStringFields() {
  std::vector<std::pair<Message, std::string>> fields = {
      {testing::ValidConnect(), "hash_seed"},
  };
  for (const Message& message : testing::AllValidKnownMessages()) {
    if (testing::HeaderObject(message).contains("kv_request_id")) {
      fields.emplace_back(message, "kv_request_id");
    }
  }
  return fields;
}

std::string FieldName(const Message& message, std::string_view field) {
  return std::string(TypeName(message)) + "." + std::string(field);
}

// ------------------------------------------------------------ strings

TEST_CASE("kv_request_id and hash_seed reject the empty string", "[codec][fields][strings]") {
  for (const auto& [message, field] : IdStringFields()) {
    INFO(FieldName(message, field));
    REQUIRE_FIELD_VIOLATION(DecodeLike(message, HeaderWith(message, field, "")), FieldName(message, field));
  }
}

TEST_CASE("kv_request_id and hash_seed accept 1 and 4096 characters", "[codec][fields][strings]") {
  for (const auto& [message, field] : IdStringFields()) {
    INFO(FieldName(message, field));
    REQUIRE_DECODES(DecodeLike(message, HeaderWith(message, field, "x")));
    REQUIRE_DECODES(DecodeLike(message, HeaderWith(message, field, std::string(4096, 'x').c_str())));
  }
}

TEST_CASE("kv_request_id and hash_seed reject 4097 characters", "[codec][fields][strings]") {
  for (const auto& [message, field] : IdStringFields()) {
    INFO(FieldName(message, field));
    const Status status = DecodeLike(message, HeaderWith(message, field, std::string(4097, 'x').c_str()));
    REQUIRE_FIELD_VIOLATION(status, FieldName(message, field));
    REQUIRE_THAT(status.message(), Catch::Contains("1 ..= 4096 characters"));
  }
}

TEST_CASE("kv_request_id and hash_seed reject control characters, naming the character", "[codec][fields][strings]") {
  for (const auto& [message, field] : IdStringFields()) {
    INFO(FieldName(message, field));
    for (const char* bad : {"a\nb", "\x01", "req\x1f", "x\x7f", "\t"}) {
      const Status status = DecodeLike(message, HeaderWith(message, field, bad));
      REQUIRE_FIELD_VIOLATION(status, FieldName(message, field));
      REQUIRE_THAT(status.message(), Catch::Contains("control characters (U+0000 ..= U+001F, U+007F)"));
    }
    const Status nul =
        DecodeLike(message, HeaderWith(message, field, boost::json::string(std::string_view("a\0b", 3))));
    REQUIRE_THAT(nul.message(), Catch::Contains("character 2 is U+0000"));
    // Spaces, non-ASCII letters and C1 code points are not in the rule's range.
    const std::string allowed = "a b " + kTwoByteChar + "\xc2\x85";
    REQUIRE_DECODES(DecodeLike(message, HeaderWith(message, field, allowed.c_str())));
  }
}

TEST_CASE("string lengths count characters, not UTF-8 bytes", "[codec][fields][strings]") {
  const Message message = testing::ValidConnect();
  const std::string at_limit = Repeat(kTwoByteChar, 4096);  // 8192 bytes
  REQUIRE_DECODES(Decode(HeaderWith(message, "hash_seed", at_limit.c_str())));
  const std::string past_limit = Repeat(kTwoByteChar, 4097);
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "hash_seed", past_limit.c_str())), "connect.hash_seed");
  // An escaped non-BMP character (a surrogate pair) is one character too.
  const std::string prefix = R"({"type":"abort_ack","round_seq":1,"kv_request_id":")";
  REQUIRE_DECODES(Decode(prefix + Repeat(R"(\ud83d\udd11)", 4096) + R"("})"));
  REQUIRE_FIELD_VIOLATION(Decode(prefix + Repeat(R"(\ud83d\udd11)", 4097) + R"("})"), "abort_ack.kv_request_id");
}

// ------------------------------------------------------------ peer_id (1.1 section 2)

TEST_CASE("peer_id accepts DNS names, IPv4 and bracketed IPv6 hosts with ports 1 ..= 65535",
          "[codec][fields][peer_id]") {
  const std::string long_host(255, 'a');  // 255 + ":65535" = 261 characters
  for (const Message& message : {Message(testing::ValidConnect()), Message(testing::ValidConnectAck())}) {
    for (const std::string& id :
         {std::string("node-a:5710"), std::string("a.b-c.example:1"), std::string("10.0.0.1:65535"),
          std::string("[::1]:7000"), std::string("[fe80::1:2]:80"), std::string("NODE9:443"), long_host + ":65535"}) {
      INFO(FieldName(message, "peer_id") << " = " << id);
      REQUIRE_DECODES(DecodeLike(message, HeaderWith(message, "peer_id", id.c_str())));
    }
  }
}

TEST_CASE("peer_id rejects every other shape, naming the field", "[codec][fields][peer_id]") {
  const std::string long_host(256, 'a');  // 262 characters with ":65535"
  for (const Message& message : {Message(testing::ValidConnect()), Message(testing::ValidConnectAck())}) {
    for (const std::string& id :
         {std::string(""), std::string("node-a"), std::string("node-a:"), std::string(":5710"), std::string("node-a:0"),
          std::string("node-a:05710"), std::string("node-a:65536"), std::string("node-a:+1"),
          std::string("node-a:57 10"), std::string("node_a:5710"), std::string("node a:5710"),
          std::string("n\u00e9:5710"), std::string("n\u0000:1"), std::string("::1:7000"), std::string("[::1:7000"),
          std::string("[node-a]:7000"), std::string("[]:7000"), std::string("[::1]7000"), long_host + ":65535"}) {
      INFO(FieldName(message, "peer_id") << " = " << id);
      REQUIRE_FIELD_VIOLATION(DecodeLike(message, HeaderWith(message, "peer_id", id.c_str())),
                              FieldName(message, "peer_id"));
    }
    REQUIRE_FIELD_VIOLATION(DecodeLike(message, HeaderWith(message, "peer_id", 5710)), FieldName(message, "peer_id"));
  }
}

TEST_CASE("the text checks return an ok Status, or kInvalid with the rule after the field name",
          "[codec][fields][peer_id]") {
  CHECK(PeerIdSyntaxError("node-a:5710").ok());
  CHECK(PeerIdSyntaxError("[::1]:5710").ok());
  const Status no_colon = PeerIdSyntaxError("node-a");
  CHECK(no_colon.code() == Status::Code::kInvalid);
  CHECK(no_colon.message() == "must be HOST:PORT; there is no ':'");
  CHECK(PeerIdSyntaxError("node-a:0").message() ==
        "must be HOST:PORT; PORT must be decimal 1 ..= 65535 without leading zeros");
  CHECK(ControlCharacterProblem("plain text").ok());
  const Status newline = ControlCharacterProblem("ab\ncd");
  CHECK(newline.code() == Status::Code::kInvalid);
  CHECK(newline.message() == "must not contain control characters (U+0000 ..= U+001F, U+007F); character 3 is U+000A");
}

// ------------------------------------------------------------ connect.features (1.1 sections 3, 7)

TEST_CASE("connect.features is optional: absent means none", "[codec][fields][features]") {
  Message decoded;
  REQUIRE_DECODES(Decode(testing::HeaderWithout(testing::ValidConnect(), "features"), 0, testing::kBlockLen, &decoded));
  CHECK(std::get<Connect>(decoded).features.empty());
}

TEST_CASE("connect.features keeps unknown names and accepts 16 names of 1 ..= 64 characters",
          "[codec][fields][features]") {
  Connect connect = testing::ValidConnect();
  connect.features.clear();
  for (int i = 0; i < 16; ++i) connect.features.push_back("future-" + std::to_string(i));
  connect.features.back() = std::string(64, 'f');
  connect.features.front() = Repeat(kTwoByteChar, 64);  // 64 characters, 128 bytes
  Message decoded;
  REQUIRE_DECODES(Decode(EncodeHeader(connect), 0, testing::kBlockLen, &decoded));
  CHECK(std::get<Connect>(decoded) == connect);
}

TEST_CASE("connect.features rejects a non-array, 17 names, an empty, long or non-string name",
          "[codec][fields][features]") {
  const Message message = testing::ValidConnect();
  boost::json::array seventeen;
  for (int i = 0; i < 17; ++i) seventeen.emplace_back("f" + std::to_string(i));
  // [[]] built by emplace_back: `array{array{}}` is a copy of the empty array
  // under the standard's list-initialization rule (clang), [[]] only in GCC 12.
  boost::json::array nested;
  nested.emplace_back(boost::json::array{});
  for (const boost::json::value& bad :
       {boost::json::value("xxh3"), boost::json::value(nullptr), boost::json::value(seventeen),
        boost::json::value(boost::json::array{""}), boost::json::value(boost::json::array{std::string(65, 'f')}),
        boost::json::value(boost::json::array{"xxh3", 3}), boost::json::value(nested)}) {
    INFO(boost::json::serialize(bad));
    const Status status = Decode(HeaderWith(message, "features", bad));
    INFO(status.message());
    REQUIRE(status.code() == Status::Code::kViolation);
    REQUIRE_THAT(status.message(), Catch::StartsWith("connect.features"));
  }
}

TEST_CASE("config_fingerprint accepts 0 and 4096 characters, rejects 4097", "[codec][fields][strings]") {
  const Message message = testing::ValidConnect();
  REQUIRE_DECODES(Decode(HeaderWith(message, "config_fingerprint", "")));
  REQUIRE_DECODES(Decode(HeaderWith(message, "config_fingerprint", std::string(4096, 'f').c_str())));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "config_fingerprint", std::string(4097, 'f').c_str())),
                          "connect.config_fingerprint");
}

TEST_CASE("disconnect reason accepts 0 and 4096 characters, rejects 4097", "[codec][fields][strings]") {
  const Message message = testing::ValidDisconnect();
  Message decoded;
  REQUIRE_DECODES(Decode(HeaderWith(message, "reason", ""), 0, 0, &decoded));
  REQUIRE(decoded == Message(Disconnect{std::string()}));
  REQUIRE_DECODES(Decode(HeaderWith(message, "reason", std::string(4096, 'r').c_str())));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "reason", std::string(4097, 'r').c_str())), "disconnect.reason");
}

TEST_CASE("disconnect reason is optional but must be a string when present", "[codec][fields][strings]") {
  Message decoded;
  REQUIRE_DECODES(Decode(R"({"type":"disconnect"})", 0, 0, &decoded));
  REQUIRE(decoded == Message(Disconnect{}));
  REQUIRE_FIELD_VIOLATION(Decode(R"({"type":"disconnect","reason":null})"), "disconnect.reason");
  REQUIRE_FIELD_VIOLATION(Decode(R"({"type":"disconnect","reason":7})"), "disconnect.reason");
}

TEST_CASE("connect_ack proof accepts any string, of any length or case", "[codec][fields][strings]") {
  const Message message = testing::ValidConnectAck();
  // A malformed proof is a wrong proof: the session reports "authentication
  // failed" for it (docs/wire-protocol.md 9(d)), so the codec must let it in.
  for (const std::string& proof :
       {std::string(), std::string("NOT-HEX"), std::string(64, 'A'), std::string(4097, 'a'), std::string(10000, 'a')}) {
    INFO(proof.size());
    Message decoded;
    REQUIRE_DECODES(Decode(HeaderWith(message, "proof", proof.c_str()), 0, 0, &decoded));
    REQUIRE(std::get<ConnectAck>(decoded).proof == proof);
  }
}

TEST_CASE("connect_ack proof must be a string when present", "[codec][fields][strings]") {
  const Message message = testing::ValidConnectAck();
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "proof", 1)), "connect_ack.proof");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "proof", nullptr)), "connect_ack.proof");
}

// ------------------------------------------------------------ keys

TEST_CASE("a key of odd length is rejected naming its index", "[codec][fields][keys]") {
  const Status status = Decode(HeaderWith(testing::ValidLookup(), "keys", array{"00", "11", "abc"}));
  REQUIRE_FIELD_VIOLATION(status, "lookup.keys[2]");
  REQUIRE_THAT(status.message(), Catch::Contains("must be lowercase hex with an even number of digits"));
}

TEST_CASE("an uppercase key is rejected", "[codec][fields][keys]") {
  const Status status = Decode(HeaderWith(testing::ValidLookup(), "keys", array{"00", "AB"}));
  REQUIRE_FIELD_VIOLATION(status, "lookup.keys[1]");
  REQUIRE_THAT(status.message(), Catch::Contains("lowercase hex"));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookup(), "keys", array{"aB"})), "lookup.keys[0]");
}

TEST_CASE("a key with non-hex characters is rejected", "[codec][fields][keys]") {
  for (const char* bad : {"0g", "0x12", " 0", "-1", "zz", "\xc3\xa9"}) {
    INFO(bad);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookup(), "keys", array{bad})), "lookup.keys[0]");
  }
}

TEST_CASE("an empty key is rejected", "[codec][fields][keys]") {
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookup(), "keys", array{"00", ""})), "lookup.keys[1]");
}

TEST_CASE("a key that is not a string is rejected", "[codec][fields][keys]") {
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookup(), "keys", array{"00", 12})), "lookup.keys[1]");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookup(), "keys", array{nullptr})), "lookup.keys[0]");
}

TEST_CASE("a key of 4096 bytes is accepted, 4097 bytes rejected", "[codec][fields][keys]") {
  Message decoded;
  REQUIRE_DECODES(
      Decode(HeaderWith(testing::ValidLookup(), "keys", array{std::string(8192, 'e').c_str()}), 0, 0, &decoded));
  REQUIRE(std::get<Lookup>(decoded).keys == std::vector<Key>{std::string(4096, '\xee')});
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookup(), "keys", array{std::string(8194, 'e').c_str()})),
                          "lookup.keys[0]");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookup(), "keys", array{std::string(8193, 'e').c_str()})),
                          "lookup.keys[0]");
}

TEST_CASE("a one-byte key is accepted", "[codec][fields][keys]") {
  Message decoded;
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidLookup(), "keys", array{"7f"}), 0, 0, &decoded));
  REQUIRE(std::get<Lookup>(decoded).keys == std::vector<Key>{"\x7f"});
}

TEST_CASE("key rules apply to keys of lookup_resp and fetch too", "[codec][fields][keys]") {
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidLookupResp(), "keys", array{"00", "11", "AA"})),
                          "lookup_resp.keys[2]");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidFetch(), "keys", array{"0", "11", "22"})), "fetch.keys[0]");
}

// ------------------------------------------------------------ list sizes

array ArrayOf(size_t count, const value& element) {
  array items;
  items.resize(count, element);
  return items;
}

TEST_CASE("keys accept 65536 elements and reject 65537", "[codec][fields][lists]") {
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidLookup(), "keys", ArrayOf(65536, "00"))));
  const Status status = Decode(HeaderWith(testing::ValidLookup(), "keys", ArrayOf(65537, "00")));
  REQUIRE_FIELD_VIOLATION(status, "lookup.keys");
  REQUIRE_THAT(status.message(), Catch::Contains("65537"));
}

TEST_CASE("hits accept 65536 elements and reject 65537", "[codec][fields][lists]") {
  boost::json::object header = testing::HeaderObject(testing::ValidLookupResp());
  header["keys"] = ArrayOf(65536, "00");
  header["hits"] = ArrayOf(65536, true);
  REQUIRE_DECODES(Decode(boost::json::serialize(header)));
  header["keys"] = ArrayOf(65537, "00");
  header["hits"] = ArrayOf(65537, true);
  // keys is checked first; hits alone past the limit is reported as hits.
  REQUIRE_FIELD_VIOLATION(Decode(boost::json::serialize(header)), "lookup_resp.keys");
  header["keys"] = ArrayOf(65536, "00");
  REQUIRE_FIELD_VIOLATION(Decode(boost::json::serialize(header)), "lookup_resp.hits");
}

TEST_CASE("fetch block_indexes accept 65536 elements and reject 65537", "[codec][fields][lists]") {
  boost::json::object header = testing::HeaderObject(testing::ValidFetch());
  header["keys"] = ArrayOf(65536, "00");
  header["block_indexes"] = ArrayOf(65536, 1);
  REQUIRE_DECODES(Decode(boost::json::serialize(header)));
  header["block_indexes"] = ArrayOf(65537, 1);
  REQUIRE_FIELD_VIOLATION(Decode(boost::json::serialize(header)), "fetch.block_indexes");
}

TEST_CASE("block_data block_indexes accept 1 and 65536 elements", "[codec][fields][lists]") {
  const Message message = testing::ValidBlockData();
  REQUIRE_DECODES(Decode(HeaderWith(message, "block_indexes", array{0}), kBlockLen, kBlockLen));
  REQUIRE_DECODES(Decode(HeaderWith(message, "block_indexes", ArrayOf(65536, 3)), 65536 * kBlockLen, kBlockLen));
}

TEST_CASE("block_data block_indexes reject 0 and 65537 elements", "[codec][fields][lists]") {
  const Message message = testing::ValidBlockData();
  const Status empty = Decode(HeaderWith(message, "block_indexes", array{}), 0, kBlockLen);
  REQUIRE_FIELD_VIOLATION(empty, "block_data.block_indexes");
  REQUIRE_THAT(empty.message(), Catch::Contains("has 0"));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "block_indexes", ArrayOf(65537, 3)), 65537 * kBlockLen, kBlockLen),
                          "block_data.block_indexes");
}

// ------------------------------------------------------------ parallel arrays

TEST_CASE("lookup_resp hits must have as many elements as keys", "[codec][fields][lists]") {
  const Message message = testing::ValidLookupResp();  // 3 keys
  const Status shorter = Decode(HeaderWith(message, "hits", array{true, false}));
  REQUIRE_FIELD_VIOLATION(shorter, "lookup_resp.hits");
  REQUIRE_THAT(shorter.message(), Catch::EndsWith("must have as many elements as keys (3), has 2"));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "hits", array{true, true, true, true})), "lookup_resp.hits");
}

TEST_CASE("lookup_resp hits must be bools", "[codec][fields][lists]") {
  const Message message = testing::ValidLookupResp();
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "hits", array{true, 1, false})), "lookup_resp.hits[1]");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "hits", array{true, false, "true"})), "lookup_resp.hits[2]");
}

TEST_CASE("fetch block_indexes must have as many elements as keys", "[codec][fields][lists]") {
  const Message message = testing::ValidFetch();  // 3 keys
  const Status status = Decode(HeaderWith(message, "block_indexes", array{1, 2}));
  REQUIRE_FIELD_VIOLATION(status, "fetch.block_indexes");
  REQUIRE_THAT(status.message(), Catch::EndsWith("must have as many elements as keys (3), has 2"));
}

// ------------------------------------------------------------ integers

TEST_CASE("block index accepts 0 and 2^31-1, rejects 2^31", "[codec][fields][integers]") {
  const Message message = testing::ValidBlockData();
  REQUIRE_DECODES(Decode(HeaderWith(message, "block_indexes", array{0, 2147483647}), 2 * kBlockLen, kBlockLen));
  const Status status = Decode(HeaderWith(message, "block_indexes", array{0, 2147483648ull}), 2 * kBlockLen, kBlockLen);
  REQUIRE_FIELD_VIOLATION(status, "block_data.block_indexes[1]");
  REQUIRE_THAT(status.message(), Catch::Contains("0 ..= 2147483647"));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidFetch(), "block_indexes", array{1, 2, 2147483648ull})),
                          "fetch.block_indexes[2]");
}

TEST_CASE("block index rejects negative, float, bool and string", "[codec][fields][integers]") {
  const Message message = testing::ValidFetch();
  for (const value& bad : {value(-1), value(1.0), value(true), value("1"), value(nullptr)}) {
    INFO(boost::json::serialize(bad));
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "block_indexes", array{0, bad, 2})), "fetch.block_indexes[1]");
  }
}

TEST_CASE("round_seq accepts 0 and 2^64-1", "[codec][fields][integers]") {
  Message decoded;
  REQUIRE_DECODES(Decode(R"({"type":"abort_fetch","kv_request_id":"r","round_seq":0})"));
  REQUIRE_DECODES(
      Decode(R"({"type":"abort_fetch","kv_request_id":"r","round_seq":18446744073709551615})", 0, 0, &decoded));
  REQUIRE(std::get<AbortFetch>(decoded).round_seq == kUint64Max);
}

TEST_CASE("round_seq rejects 2^64, negative, float, bool and string", "[codec][fields][integers]") {
  for (const char* bad :
       {"18446744073709551616", "-1", "-9223372036854775808", "1.0", "1e3", "0.5", "true", "false", "\"1\"", "null"}) {
    INFO(bad);
    const std::string json = std::string(R"({"type":"abort_fetch","kv_request_id":"r","round_seq":)") + bad + "}";
    REQUIRE_FIELD_VIOLATION(Decode(json), "abort_fetch.round_seq");
  }
}

TEST_CASE("a negative integer names the rule and the value", "[codec][fields][integers]") {
  const Status status = Decode(R"({"type":"abort_ack","kv_request_id":"r","round_seq":-5})");
  REQUIRE_FIELD_VIOLATION(status, "abort_ack.round_seq");
  REQUIRE_THAT(status.message(), Catch::Contains("is -5"));
}

TEST_CASE("a bool is not an integer", "[codec][fields][integers]") {
  const Status status = Decode(HeaderWith(testing::ValidConnect(), "wire_major", true));
  REQUIRE_FIELD_VIOLATION(status, "connect.wire_major");
  REQUIRE_THAT(status.message(), Catch::Contains("must be an integer, not a bool"));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidConnectAck(), "wire_minor", false)),
                          "connect_ack.wire_minor");
}

TEST_CASE("an integer is not a bool", "[codec][fields][integers]") {
  const Status status = Decode(HeaderWith(testing::ValidTransferDone(), "success", 1));
  REQUIRE_FIELD_VIOLATION(status, "transfer_done.success");
  REQUIRE_THAT(status.message(), Catch::Contains("must be a bool"));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidTransferDone(), "success", 0)), "transfer_done.success");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidTransferDone(), "success", "true")), "transfer_done.success");
}

TEST_CASE("wire versions are checked for type and range only", "[codec][fields][integers]") {
  Message decoded;
  const std::string json = HeaderWith(testing::ValidConnect(), "wire_major", 7);
  REQUIRE_DECODES(Decode(json, 0, 0, &decoded));
  REQUIRE(std::get<Connect>(decoded).wire_major == 7);
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidConnect(), "wire_minor", -1)), "connect.wire_minor");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidConnect(), "wire_major", 1.5)), "connect.wire_major");
}

TEST_CASE("block_len accepts 1 and 64 MiB", "[codec][fields][integers]") {
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidConnect(), "block_len", 1)));
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidConnect(), "block_len", 67108864)));
}

TEST_CASE("block_len rejects 0 and 64 MiB + 1", "[codec][fields][integers]") {
  const Status zero = Decode(HeaderWith(testing::ValidConnect(), "block_len", 0));
  REQUIRE_FIELD_VIOLATION(zero, "connect.block_len");
  REQUIRE_THAT(zero.message(), Catch::Contains("1 ..= 67108864"));
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidConnect(), "block_len", 67108865)), "connect.block_len");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidConnect(), "block_len", -4096)), "connect.block_len");
}

// ------------------------------------------------------------ epoch and nonce

TEST_CASE("epoch must be exactly 32 lowercase hex digits", "[codec][fields][tokens]") {
  for (const Message& message : {Message(testing::ValidConnect()), Message(testing::ValidConnectAck())}) {
    const std::string field = FieldName(message, "epoch");
    INFO(field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "epoch", kEpoch.substr(1).c_str())), field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "epoch", (kEpoch + "0").c_str())), field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "epoch", "")), field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "epoch", "0123456789ABCDEF0123456789abcdef")), field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "epoch", "0123456789abcdeg0123456789abcdef")), field);
  }
}

TEST_CASE("epoch must not be all zeros", "[codec][fields][tokens]") {
  for (const Message& message : {Message(testing::ValidConnect()), Message(testing::ValidConnectAck())}) {
    const Status status = Decode(HeaderWith(message, "epoch", std::string(32, '0').c_str()));
    REQUIRE_FIELD_VIOLATION(status, FieldName(message, "epoch"));
    REQUIRE_THAT(status.message(), Catch::Contains("all zeros"));
  }
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidConnect(), "epoch", "00000000000000000000000000000001")));
}

TEST_CASE("nonce may be all zeros", "[codec][fields][tokens]") {
  const std::string zeros(32, '0');
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidConnect(), "nonce", zeros.c_str())));
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidPing(), "nonce", zeros.c_str())));
  REQUIRE_DECODES(Decode(HeaderWith(testing::ValidPong(), "nonce", zeros.c_str())));
}

TEST_CASE("nonce must be exactly 32 lowercase hex digits", "[codec][fields][tokens]") {
  for (const Message& message :
       {Message(testing::ValidConnect()), Message(testing::ValidPing()), Message(testing::ValidPong())}) {
    const std::string field = FieldName(message, "nonce");
    INFO(field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "nonce", kNonce.substr(1).c_str())), field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "nonce", (kNonce + "00").c_str())), field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "nonce", "FEDCBA9876543210fedcba9876543210")), field);
    REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(message, "nonce", 12345)), field);
  }
}

// ------------------------------------------------------------ block_data payload

TEST_CASE("block_data payload must be len(block_indexes) * block_len", "[codec][payload]") {
  const std::string json = EncodeHeader(testing::ValidBlockData());  // 3 indexes
  REQUIRE_DECODES(Decode(json, 3 * kBlockLen, kBlockLen));
  const Status status = Decode(json, 2 * kBlockLen, kBlockLen);
  REQUIRE_FIELD_VIOLATION(status, "block_data.payload_len");
  REQUIRE_THAT(status.message(), Catch::Contains("3 * 4096 = 12288, is 8192"));
  REQUIRE_FIELD_VIOLATION(Decode(json, 3 * kBlockLen + 1, kBlockLen), "block_data.payload_len");
  REQUIRE_FIELD_VIOLATION(Decode(json, 0, kBlockLen), "block_data.payload_len");
}

TEST_CASE("block_data payload length is not checked while block_len is unknown", "[codec][payload]") {
  const std::string json = EncodeHeader(testing::ValidBlockData());
  REQUIRE_DECODES(Decode(json, 0, 0));
  REQUIRE_DECODES(Decode(json, 17, 0));
}

TEST_CASE("block_data payload check does not overflow with a huge block_len", "[codec][payload]") {
  const std::string json = EncodeHeader(testing::ValidBlockData());  // 3 indexes
  // 3 * (2^63) wraps to 2^63 in uint64 arithmetic; it must not match.
  const uint64_t huge = 1ull << 63;
  REQUIRE_FIELD_VIOLATION(Decode(json, huge, huge), "block_data.payload_len");
  REQUIRE_FIELD_VIOLATION(Decode(json, huge, kUint64Max), "block_data.payload_len");
}

TEST_CASE("block_data with no indexes is rejected even with an empty payload", "[codec][payload]") {
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidBlockData(), "block_indexes", array{}), 0, kBlockLen),
                          "block_data.block_indexes");
  REQUIRE_FIELD_VIOLATION(Decode(HeaderWith(testing::ValidBlockData(), "block_indexes", array{}), 0, 0),
                          "block_data.block_indexes");
}

}  // namespace
}  // namespace kvpeer::protocol
