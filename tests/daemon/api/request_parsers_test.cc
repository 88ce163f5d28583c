// The control requests' parsers (daemon/api/request_parsers.h), one section
// per op: a valid request, each field missing and of the wrong type, and
// the op's own rules. Bounds at and one past each limit are in
// request_limits_test.cc. Codes only, never message text.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include <boost/json/serialize.hpp>

#include "daemon/api/request_parsers.h"
#include "tests/daemon/api/request_test_util.h"

namespace kvpeer::daemon {
namespace {

using testing::CodeOf;
using testing::Request;
namespace json = boost::json;

// Each field of `valid` removed, then replaced by each of `wrong`: all
// bad_request.
template <typename Parse>
void EachFieldMissingOrMistyped(Parse parse, const json::object& valid, std::initializer_list<json::value> wrong) {
  for (const auto& field : valid) {
    const std::string name(field.key());
    if (name == "op") continue;
    json::object missing = valid;
    missing.erase(name);
    INFO("without " << name);
    const bool optional =
        name == "fd" || name == "path" || name == "offset" || name == "seal" || name == "flush" || name == "wait_ms";
    if (!optional) CHECK(CodeOf(parse(missing)) == "bad_request");
    for (const json::value& value : wrong) {
      if (value.kind() == field.value().kind()) continue;  // not mistyped
      json::object mistyped = valid;
      mistyped[name] = value;
      INFO(name << " = " << json::serialize(value));
      CHECK(CodeOf(parse(mistyped)) == "bad_request");
    }
  }
}

// Values of every JSON kind, for mistyping fields.
const std::initializer_list<json::value> kWrongKinds = {nullptr, true, "text", 1.5, json::array{}, json::object{}};

TEST_CASE("hello: valid, missing and mistyped fields, block_len 0") {
  const json::object valid =
      Request(R"({"op":"hello","client":"e","block_len":64,"config_fingerprint":"","hash_seed":"s"})");
  StatusOr<HelloRequest> hello = ParseHello(valid);
  REQUIRE(hello.ok());
  CHECK(hello->client == "e");
  CHECK(hello->block_len == 64);
  CHECK(hello->config_fingerprint.empty());
  CHECK(hello->hash_seed == "s");
  EachFieldMissingOrMistyped(ParseHello, valid, kWrongKinds);
  json::object zero = valid;
  zero["block_len"] = 0;
  CHECK(CodeOf(ParseHello(zero)) == "bad_request");
  json::object negative = valid;
  negative["block_len"] = -1;
  CHECK(CodeOf(ParseHello(negative)) == "bad_request");
  json::object control = valid;
  control["hash_seed"] = "a\tb";  // goes on the wire, which forbids control characters
  CHECK(CodeOf(ParseHello(control)) == "bad_request");
  json::object empty_seed = valid;
  empty_seed["hash_seed"] = "";
  CHECK(CodeOf(ParseHello(empty_seed)) == "bad_request");
  json::object empty_client = valid;
  empty_client["client"] = "";
  CHECK(CodeOf(ParseHello(empty_client)) == "bad_request");
}

TEST_CASE("register_region: path or fd, num_blocks, offset") {
  const json::object by_path = Request(R"({"path":"/dev/shm/r","num_blocks":8,"offset":4096})");
  StatusOr<RegisterRegionRequest> region = ParseRegisterRegion(by_path);
  REQUIRE(region.ok());
  CHECK_FALSE(region->by_fd());
  CHECK(*region->path == "/dev/shm/r");
  CHECK(region->num_blocks == 8);
  CHECK(region->offset == 4096);
  EachFieldMissingOrMistyped(ParseRegisterRegion, by_path, kWrongKinds);

  const json::object by_fd = Request(R"({"fd":true,"num_blocks":8})");
  StatusOr<RegisterRegionRequest> fd = ParseRegisterRegion(by_fd);
  REQUIRE(fd.ok());
  CHECK(fd->by_fd());
  CHECK(fd->offset == 0);
  EachFieldMissingOrMistyped(ParseRegisterRegion, by_fd, kWrongKinds);

  CHECK(CodeOf(ParseRegisterRegion(Request(R"({"num_blocks":8})"))) == "bad_request");  // neither
  CHECK(CodeOf(ParseRegisterRegion(Request(R"({"fd":false,"num_blocks":8})"))) == "bad_request");
  CHECK(CodeOf(ParseRegisterRegion(Request(R"({"fd":true,"path":"/r","num_blocks":8})"))) == "bad_request");
  CHECK(CodeOf(ParseRegisterRegion(Request(R"({"fd":false,"path":"/r","num_blocks":8})"))) == "ok");
  CHECK(CodeOf(ParseRegisterRegion(Request(R"({"fd":true,"num_blocks":0})"))) == "bad_request");
  CHECK(CodeOf(ParseRegisterRegion(Request(R"({"fd":true,"num_blocks":1,"offset":-1})"))) == "bad_request");
  CHECK(CodeOf(ParseRegisterRegion(Request(R"({"fd":true,"num_blocks":1,"offset":18446744073709551615})"))) == "ok");
}

TEST_CASE("publish: keys and block_ids in pairs, optional seal") {
  const json::object valid = Request(R"({"keys":["00ff","0a"],"block_ids":[3,0],"seal":true})");
  StatusOr<PublishRequest> publish = ParsePublish(valid);
  REQUIRE(publish.ok());
  REQUIRE(publish->keys.size() == 2);
  CHECK(publish->keys[0] == protocol::Key{0x00, static_cast<char>(0xff)});
  CHECK(publish->block_ids == std::vector<uint64_t>{3, 0});
  CHECK(publish->seal);
  EachFieldMissingOrMistyped(ParsePublish, valid, kWrongKinds);
  CHECK_FALSE(ParsePublish(Request(R"({"keys":[],"block_ids":[]})"))->seal);  // empty lists allowed
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":["00"],"block_ids":[]})"))) == "bad_request");
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":["00"],"block_ids":[-1]})"))) == "bad_request");
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":["00"],"block_ids":[1.0]})"))) == "bad_request");
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":["ABCD"],"block_ids":[1]})"))) == "bad_request");  // uppercase
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":["abc"],"block_ids":[1]})"))) == "bad_request");   // odd digits
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":[""],"block_ids":[1]})"))) == "bad_request");
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":[7],"block_ids":[1]})"))) == "bad_request");
}

TEST_CASE("unpublish: keys") {
  const json::object valid = Request(R"({"keys":["00ff"]})");
  StatusOr<UnpublishRequest> unpublish = ParseUnpublish(valid);
  REQUIRE(unpublish.ok());
  CHECK(unpublish->keys.size() == 1);
  EachFieldMissingOrMistyped(ParseUnpublish, valid, kWrongKinds);
  CHECK(CodeOf(ParseUnpublish(Request(R"({"keys":[]})"))) == "ok");
  CHECK(CodeOf(ParseUnpublish(Request(R"({"keys":["zz"]})"))) == "bad_request");
}

TEST_CASE("lookup: peer, kv_request_id, keys, optional flush and wait_ms") {
  const json::object valid =
      Request(R"({"peer":"h:7070","kv_request_id":"r","keys":["00"],"flush":true,"wait_ms":50})");
  StatusOr<LookupRequest> lookup = ParseLookup(valid);
  REQUIRE(lookup.ok());
  CHECK(lookup->peer == "h:7070");
  CHECK(lookup->kv_request_id == "r");
  CHECK(lookup->keys.size() == 1);
  CHECK(lookup->flush);
  CHECK(lookup->wait_ms == 50);
  EachFieldMissingOrMistyped(ParseLookup, valid, kWrongKinds);
  StatusOr<LookupRequest> plain = ParseLookup(Request(R"({"peer":"[::1]:1","kv_request_id":"r","keys":[]})"));
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->flush);
  CHECK(plain->wait_ms == 0);
  for (const char* peer : {"h", ":7070", "h:", "h:0", "h:x", "h:-1"}) {
    json::object bad = valid;
    bad["peer"] = peer;
    INFO(peer);
    CHECK(CodeOf(ParseLookup(bad)) == "bad_request");
  }
  json::object control = valid;
  control["kv_request_id"] = "a\x7f";
  CHECK(CodeOf(ParseLookup(control)) == "bad_request");
  json::object negative = valid;
  negative["wait_ms"] = -1;
  CHECK(CodeOf(ParseLookup(negative)) == "bad_request");
}

TEST_CASE("load: job_id, peer, kv_request_id, at least one key, block_ids in pairs") {
  const json::object valid =
      Request(R"({"job_id":-5,"peer":"h:7070","kv_request_id":"r","keys":["00","01"],"block_ids":[4,5]})");
  StatusOr<LoadRequest> load = ParseLoad(valid);
  REQUIRE(load.ok());
  CHECK(load->job_id == -5);  // any int64
  CHECK(load->peer == "h:7070");
  CHECK(load->kv_request_id == "r");
  CHECK(load->keys.size() == 2);
  CHECK(load->block_ids == std::vector<uint64_t>{4, 5});
  EachFieldMissingOrMistyped(ParseLoad, valid, kWrongKinds);
  json::object no_keys = valid;
  no_keys["keys"] = json::array{};
  no_keys["block_ids"] = json::array{};
  CHECK(CodeOf(ParseLoad(no_keys)) == "bad_request");
  json::object unpaired = valid;
  unpaired["block_ids"] = json::array{4};
  CHECK(CodeOf(ParseLoad(unpaired)) == "bad_request");
  json::object job_max = valid;
  job_max["job_id"] = std::numeric_limits<int64_t>::max();
  CHECK(CodeOf(ParseLoad(job_max)) == "ok");
  json::object job_min = valid;
  job_min["job_id"] = std::numeric_limits<int64_t>::min();
  CHECK(CodeOf(ParseLoad(job_min)) == "ok");
  json::object job_past = valid;
  job_past["job_id"] = uint64_t{1} << 63;
  CHECK(CodeOf(ParseLoad(job_past)) == "bad_request");
}

TEST_CASE("store: job_id, kv_request_id, at least one key, block_ids in pairs, optional seal") {
  const json::object valid = Request(R"({"job_id":7,"kv_request_id":"r","keys":["00"],"block_ids":[1],"seal":true})");
  StatusOr<StoreRequest> store = ParseStore(valid);
  REQUIRE(store.ok());
  CHECK(store->job_id == 7);
  CHECK(store->kv_request_id == "r");
  CHECK(store->keys.size() == 1);
  CHECK(store->block_ids == std::vector<uint64_t>{1});
  CHECK(store->seal);
  EachFieldMissingOrMistyped(ParseStore, valid, kWrongKinds);
  CHECK_FALSE(ParseStore(Request(R"({"job_id":7,"kv_request_id":"r","keys":["00"],"block_ids":[1]})"))->seal);
  CHECK(CodeOf(ParseStore(Request(R"({"job_id":7,"kv_request_id":"r","keys":[],"block_ids":[]})"))) == "bad_request");
  CHECK(CodeOf(ParseStore(Request(R"({"job_id":7,"kv_request_id":"r","keys":["00"],"block_ids":[1,2]})"))) ==
        "bad_request");
}

TEST_CASE("finish: kv_request_id") {
  const json::object valid = Request(R"({"kv_request_id":"r"})");
  StatusOr<FinishRequest> finish = ParseFinish(valid);
  REQUIRE(finish.ok());
  CHECK(finish->kv_request_id == "r");
  EachFieldMissingOrMistyped(ParseFinish, valid, kWrongKinds);
  CHECK(CodeOf(ParseFinish(Request(R"({"kv_request_id":""})"))) == "bad_request");
  CHECK(CodeOf(ParseFinish(Request(R"({"kv_request_id":"a\u0000"})"))) == "bad_request");
}

TEST_CASE("poll: optional wait_ms") {
  StatusOr<PollRequest> plain = ParsePoll(Request("{}"));
  REQUIRE(plain.ok());
  CHECK(plain->wait_ms == 0);
  const json::object valid = Request(R"({"wait_ms":10})");
  CHECK(ParsePoll(valid)->wait_ms == 10);
  EachFieldMissingOrMistyped(ParsePoll, valid, kWrongKinds);
  CHECK(CodeOf(ParsePoll(Request(R"({"wait_ms":-1})"))) == "bad_request");
  CHECK(CodeOf(ParsePoll(Request(R"({"wait_ms":"10"})"))) == "bad_request");
}

TEST_CASE("connect and disconnect: peer") {
  const json::object valid = Request(R"({"peer":"10.0.0.2:5710"})");
  StatusOr<PeerRequest> peer = ParsePeerRequest(valid);
  REQUIRE(peer.ok());
  CHECK(peer->peer == "10.0.0.2:5710");
  EachFieldMissingOrMistyped(ParsePeerRequest, valid, kWrongKinds);
  CHECK(CodeOf(ParsePeerRequest(Request(R"({"peer":"10.0.0.2"})"))) == "bad_request");
}

TEST_CASE("unknown fields are ignored and null is not absent") {
  CHECK(CodeOf(ParseFinish(Request(R"({"kv_request_id":"r","extra":[1,2]})"))) == "ok");
  CHECK(CodeOf(ParsePoll(Request(R"({"wait_ms":null})"))) == "bad_request");
  CHECK(CodeOf(ParsePublish(Request(R"({"keys":[],"block_ids":[],"seal":null})"))) == "bad_request");
}

}  // namespace
}  // namespace kvpeer::daemon
