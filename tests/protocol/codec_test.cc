// Codec: round trips, the encoded form and the header-level
// rules of spec section 2 (object, type, payload). Field rules are in
// codec_fields_test.cc.
#include "protocol/codec.h"

#include <limits>
#include <string>

#include <catch2/catch.hpp>

#include "base/hex.h"
#include "protocol/messages.h"
#include "tests/protocol/codec_test_util.h"

namespace kvpeer::protocol {
namespace {

using testing::Decode;
using testing::kBlockLen;
using testing::kEpoch;
using testing::kNonce;

// Encodes, decodes with the payload the message needs, and returns the result.
Message RoundTrip(const Message& message) {
  Message decoded;
  const Status status =
      DecodeHeader(EncodeHeader(message), testing::ValidPayloadLen(message), DecodeContext{kBlockLen}, &decoded);
  INFO("header: " << EncodeHeader(message) << " status: " << status.message());
  REQUIRE(status.ok());
  return decoded;
}

// ------------------------------------------------------------ round trips

TEST_CASE("round trip: connect", "[codec][roundtrip]") {
  Connect message = testing::ValidConnect();
  message.config_fingerprint = "";  // the empty fingerprint is legal
  REQUIRE(RoundTrip(message) == Message(message));
}

TEST_CASE("round trip: connect_ack without proof", "[codec][roundtrip]") {
  const Message message = testing::ValidConnectAck();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: connect_ack with proof", "[codec][roundtrip]") {
  ConnectAck message = testing::ValidConnectAck();
  message.proof = std::string(64, 'a');
  REQUIRE(RoundTrip(message) == Message(message));
}

TEST_CASE("round trip: connect_ack with empty proof keeps it present", "[codec][roundtrip]") {
  ConnectAck message = testing::ValidConnectAck();
  message.proof = std::string();
  REQUIRE(RoundTrip(message) == Message(message));
}

TEST_CASE("round trip: disconnect with reason", "[codec][roundtrip]") {
  const Message message = testing::ValidDisconnect();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: disconnect without reason", "[codec][roundtrip]") {
  const Message message = Disconnect{};
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: ping", "[codec][roundtrip]") {
  const Message message = testing::ValidPing();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: pong", "[codec][roundtrip]") {
  const Message message = testing::ValidPong();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: lookup", "[codec][roundtrip]") {
  const Message message = testing::ValidLookup();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: lookup with no keys", "[codec][roundtrip]") {
  const Message message = Lookup{"req-1", {}, 0};
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: lookup_resp", "[codec][roundtrip]") {
  const Message message = testing::ValidLookupResp();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: fetch", "[codec][roundtrip]") {
  const Message message = testing::ValidFetch();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: the terminal empty fetch", "[codec][roundtrip]") {
  const Message message = Fetch{"req-1", {}, {}, 9};
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: block_data", "[codec][roundtrip]") {
  const Message message = testing::ValidBlockData();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: transfer_done success and failure", "[codec][roundtrip]") {
  TransferDone message = testing::ValidTransferDone();
  REQUIRE(RoundTrip(message) == Message(message));
  message.success = false;
  REQUIRE(RoundTrip(message) == Message(message));
}

TEST_CASE("round trip: abort_fetch", "[codec][roundtrip]") {
  const Message message = testing::ValidAbortFetch();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: abort_ack", "[codec][roundtrip]") {
  const Message message = testing::ValidAbortAck();
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: unknown type", "[codec][roundtrip]") {
  const Message message = Unknown{"future_message"};
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: keys holding every byte value", "[codec][roundtrip]") {
  Key all_bytes;
  for (int byte = 0; byte < 256; ++byte) all_bytes.push_back(static_cast<char>(byte));
  const Message message = Lookup{"req-1", {all_bytes, std::string(1, '\0')}, 1};
  REQUIRE(RoundTrip(message) == message);
}

TEST_CASE("round trip: non-ASCII strings", "[codec][roundtrip]") {
  Connect message = testing::ValidConnect();
  message.config_fingerprint = "mod\xc3\xa8le \xe2\x9c\x93 \"quoted\" \\ \n";
  message.hash_seed = "\xf0\x9f\x94\x91";
  REQUIRE(RoundTrip(message) == Message(message));
}

TEST_CASE("round trip: integer extremes", "[codec][roundtrip]") {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  REQUIRE(RoundTrip(AbortAck{"r", max}) == Message(AbortAck{"r", max}));
  Connect connect = testing::ValidConnect();
  connect.wire_major = max;
  connect.wire_minor = max;
  REQUIRE(RoundTrip(connect) == Message(connect));
  const Message fetch = Fetch{"r", {"k"}, {2147483647u}, 0};
  REQUIRE(RoundTrip(fetch) == fetch);
}

TEST_CASE("the examples of docs/wire-protocol.md decode", "[codec][roundtrip]") {
  Message decoded;
  REQUIRE_DECODES(Decode(R"({"type":"lookup_resp","kv_request_id":"cmpl-7f3a9c2e-0","round_seq":7,)"
                         R"("keys":["460dfb8729c82b22e6ff1582a56b5c7a249ae515d272f8018da135a3b9e7484300000000",)"
                         R"("ea1b74fe2d5431009a6facd2578e0c58e2d4472fb90b34d2c3147c018e9f0bfb00000000"],)"
                         R"("hits":[true,false]})",
                         0, 0, &decoded));
  const auto& resp = std::get<LookupResp>(decoded);
  CHECK(resp.keys[0].size() == 36);
  CHECK(ToHex(resp.keys[1]) == "ea1b74fe2d5431009a6facd2578e0c58e2d4472fb90b34d2c3147c018e9f0bfb00000000");
  CHECK(resp.hits == std::vector<bool>{true, false});
  CHECK(resp.round_seq == 7);
  REQUIRE_DECODES(
      Decode(R"({"type":"block_data","kv_request_id":"cmpl-7f3a9c2e-0","round_seq":7,"block_indexes":[118,119]})",
             4194304, 2097152, &decoded));
  CHECK(decoded == Message(BlockData{"cmpl-7f3a9c2e-0", 7, {118, 119}}));
}

// ------------------------------------------------------------ encoded form

TEST_CASE("TypeName gives the wire type of every message", "[codec][encode]") {
  CHECK(TypeName(Connect{}) == "connect");
  CHECK(TypeName(ConnectAck{}) == "connect_ack");
  CHECK(TypeName(Disconnect{}) == "disconnect");
  CHECK(TypeName(Ping{}) == "ping");
  CHECK(TypeName(Pong{}) == "pong");
  CHECK(TypeName(Lookup{}) == "lookup");
  CHECK(TypeName(LookupResp{}) == "lookup_resp");
  CHECK(TypeName(Fetch{}) == "fetch");
  CHECK(TypeName(BlockData{}) == "block_data");
  CHECK(TypeName(TransferDone{}) == "transfer_done");
  CHECK(TypeName(AbortFetch{}) == "abort_fetch");
  CHECK(TypeName(AbortAck{}) == "abort_ack");
  CHECK(TypeName(Unknown{"x_y"}) == "x_y");
}

TEST_CASE("encoded header is compact JSON with the type first", "[codec][encode]") {
  CHECK(EncodeHeader(Ping{kNonce}) == R"({"type":"ping","nonce":")" + kNonce + R"("})");
  CHECK(EncodeHeader(AbortFetch{"r", 18446744073709551615ull}) ==
        R"({"type":"abort_fetch","kv_request_id":"r","round_seq":18446744073709551615})");
  CHECK(EncodeHeader(TransferDone{"r", true, 3}) ==
        R"({"type":"transfer_done","kv_request_id":"r","success":true,"round_seq":3})");
}

TEST_CASE("encoded keys are lowercase hex and indexes and hits are arrays", "[codec][encode]") {
  CHECK(EncodeHeader(LookupResp{"r", {"\xab\xcd", "\x01"}, {true, false}, 1}) ==
        R"({"type":"lookup_resp","kv_request_id":"r","keys":["abcd","01"],"hits":[true,false],"round_seq":1})");
  CHECK(EncodeHeader(Fetch{"r", {"\xff"}, {7}, 2}) ==
        R"({"type":"fetch","kv_request_id":"r","keys":["ff"],"block_indexes":[7],"round_seq":2})");
}

TEST_CASE("empty optional fields are omitted when encoding", "[codec][encode]") {
  CHECK(EncodeHeader(Disconnect{}) == R"({"type":"disconnect"})");
  CHECK(EncodeHeader(Disconnect{std::string()}) == R"({"type":"disconnect","reason":""})");
  CHECK(EncodeHeader(ConnectAck{"p:1", 1, 1, kEpoch, std::nullopt}) ==
        R"({"type":"connect_ack","peer_id":"p:1","wire_major":1,"wire_minor":1,"epoch":")" + kEpoch + R"("})");
}

TEST_CASE("unknown message encodes as its type only", "[codec][encode]") {
  CHECK(EncodeHeader(Unknown{"telemetry"}) == R"({"type":"telemetry"})");
}

// ------------------------------------------------------------ header rules

TEST_CASE("malformed JSON is a header violation", "[codec][header]") {
  REQUIRE_FIELD_VIOLATION(Decode(R"({"type":"ping",)"), "header");
  REQUIRE_FIELD_VIOLATION(Decode(R"({"type" "ping"})"), "header");
  REQUIRE_FIELD_VIOLATION(Decode(""), "header");
  REQUIRE_FIELD_VIOLATION(Decode(R"({"type":"ping"} {})"), "header");
  REQUIRE_FIELD_VIOLATION(Decode(R"({"type":"ping",})"), "header");       // no trailing commas
  REQUIRE_FIELD_VIOLATION(Decode("{/*c*/\"type\":\"ping\"}"), "header");  // no comments
}

TEST_CASE("invalid UTF-8 in the header is a header violation", "[codec][header]") {
  REQUIRE_FIELD_VIOLATION(Decode("{\"type\":\"disconnect\",\"reason\":\"\xff\"}"), "header");
}

TEST_CASE("malformed JSON message says where parsing stopped", "[codec][header]") {
  const Status status = Decode(R"({"type":"ping",})");
  REQUIRE_THAT(status.message(), Catch::Contains("byte"));
}

TEST_CASE("nesting beyond the depth limit is a header violation", "[codec][header]") {
  const std::string deep = R"({"type":"ping","x":)" + std::string(100, '[') + std::string(100, ']') + "}";
  REQUIRE_FIELD_VIOLATION(Decode(deep), "header");
}

TEST_CASE("moderately nested unknown fields are ignored", "[codec][header]") {
  const std::string nested =
      R"({"type":"ping","nonce":")" + kNonce + R"(","x":)" + std::string(30, '[') + std::string(30, ']') + "}";
  REQUIRE_DECODES(Decode(nested));
}

TEST_CASE("a header that is not a JSON object is a violation", "[codec][header]") {
  for (const char* json : {"[]", R"(["type","ping"])", R"("ping")", "42", "null", "true"}) {
    INFO(json);
    REQUIRE_FIELD_VIOLATION(Decode(json), "header");
  }
  REQUIRE_THAT(Decode("[]").message(), Catch::Contains("must be a JSON object"));
}

TEST_CASE("a header without type is a violation", "[codec][header]") {
  REQUIRE_FIELD_VIOLATION(Decode("{}"), "type");
  REQUIRE_FIELD_VIOLATION(Decode(R"({"nonce":")" + kNonce + R"("})"), "type");
}

TEST_CASE("a non-string type is a violation", "[codec][header]") {
  for (const char* json :
       {R"({"type":1})", R"({"type":null})", R"({"type":true})", R"({"type":["ping"]})", R"({"type":{}})"}) {
    INFO(json);
    REQUIRE_FIELD_VIOLATION(Decode(json), "type");
    REQUIRE_THAT(Decode(json).message(), Catch::Contains("must be a string"));
  }
}

TEST_CASE("an unknown type is accepted with any payload and any fields", "[codec][header]") {
  Message decoded;
  REQUIRE_DECODES(Decode(R"({"type":"hello_v2","keys":"not a list","x":[1,2]})", 12345, kBlockLen, &decoded));
  REQUIRE(decoded == Message(Unknown{"hello_v2"}));
}

TEST_CASE("type names are case-sensitive: PING is an unknown type", "[codec][header]") {
  Message decoded;
  REQUIRE_DECODES(Decode(R"({"type":"PING"})", 0, 0, &decoded));
  REQUIRE(decoded == Message(Unknown{"PING"}));
}

TEST_CASE("an empty type string is an unknown type", "[codec][header]") {
  Message decoded;
  REQUIRE_DECODES(Decode(R"({"type":""})", 0, 0, &decoded));
  REQUIRE(decoded == Message(Unknown{""}));
}

TEST_CASE("unknown extra fields of known messages are ignored", "[codec][header]") {
  for (const Message& message : testing::AllValidKnownMessages()) {
    INFO(TypeName(message));
    const std::string json = testing::HeaderWith(message, "future_field", {1, "two", nullptr});
    Message decoded;
    REQUIRE_DECODES(Decode(json, testing::ValidPayloadLen(message), kBlockLen, &decoded));
    REQUIRE(decoded == message);
  }
}

TEST_CASE("a payload on any control message is a violation", "[codec][header]") {
  for (const Message& message : testing::AllValidKnownMessages()) {
    if (std::holds_alternative<BlockData>(message)) continue;
    INFO(TypeName(message));
    const std::string field = std::string(TypeName(message)) + ".payload_len";
    REQUIRE_FIELD_VIOLATION(Decode(EncodeHeader(message), 1, kBlockLen), field);
    REQUIRE_FIELD_VIOLATION(Decode(EncodeHeader(message), kBlockLen, kBlockLen), field);
  }
}

TEST_CASE("a missing required field is a violation naming it", "[codec][fields]") {
  for (const Message& message : testing::AllValidKnownMessages()) {
    for (const auto& [name, value] : testing::HeaderObject(message)) {
      const bool optional = name == "reason" || name == "proof" || name == "features";
      if (name == "type" || optional) continue;
      const std::string field = std::string(TypeName(message)) + "." + std::string(name);
      INFO(field);
      const Status status = testing::DecodeLike(message, testing::HeaderWithout(message, name));
      REQUIRE_FIELD_VIOLATION(status, field);
      REQUIRE_THAT(status.message(), Catch::EndsWith("is required"));
    }
  }
}

TEST_CASE("a field of the wrong JSON type is a violation naming it", "[codec][fields]") {
  const boost::json::value wrong_values[] = {nullptr, boost::json::object{}, "text", true, 1, boost::json::array{}};
  for (const Message& message : testing::AllValidKnownMessages()) {
    for (const auto& [name, value] : testing::HeaderObject(message)) {
      if (name == "type") continue;
      for (const boost::json::value& wrong : wrong_values) {
        if (wrong.kind() == value.kind() || (wrong.is_int64() && value.is_uint64()) ||
            (wrong.is_uint64() && value.is_int64())) {
          continue;
        }
        const std::string field = std::string(TypeName(message)) + "." + std::string(name);
        INFO(field << " = " << boost::json::serialize(wrong));
        const Status status = testing::DecodeLike(message, testing::HeaderWith(message, name, wrong));
        REQUIRE_FIELD_VIOLATION(status, field);
      }
    }
  }
}

TEST_CASE("the first failing field is the one reported", "[codec][fields]") {
  boost::json::object header = testing::HeaderObject(testing::ValidConnect());
  header["peer_id"] = "";
  header["nonce"] = "";
  REQUIRE_FIELD_VIOLATION(Decode(boost::json::serialize(header)), "connect.peer_id");
}

}  // namespace
}  // namespace kvpeer::protocol
