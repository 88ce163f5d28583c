// Each bound of daemon/api/request_limits.h: at the bound the parsers
// accept, one past it they answer bad_request; and docs/control-api.md's
// table of field rules ("1. Framing") states the same bounds.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <boost/json/serialize.hpp>

#include "daemon/api/request_limits.h"
#include "daemon/api/request_parsers.h"
#include "tests/daemon/api/request_test_util.h"

#if !defined(KVPEER_CONTROL_API_DOC)
#error "KVPEER_CONTROL_API_DOC must name docs/control-api.md"
#endif

namespace kvpeer::daemon {
namespace {

using testing::BlockIds;
using testing::Chars;
using testing::CodeOf;
using testing::HexKeys;
using testing::Request;
namespace json = boost::json;

json::object Hello() { return Request(R"({"client":"e","block_len":64,"config_fingerprint":"f","hash_seed":"s"})"); }

TEST_CASE("string fields: 4096 characters pass, 4097 do not") {
  for (const char* field : {"client", "config_fingerprint", "hash_seed"}) {
    INFO(field);
    json::object at = Hello();
    at[field] = Chars(kMaxRequestStringChars);
    CHECK(CodeOf(ParseHello(at)) == "ok");
    json::object past = Hello();
    past[field] = Chars(kMaxRequestStringChars + 1);
    CHECK(CodeOf(ParseHello(past)) == "bad_request");
  }
  // Counted in characters, not bytes: 4096 two-byte characters pass.
  std::string wide;
  for (size_t i = 0; i < kMaxRequestStringChars; ++i) wide += "\xc3\xa9";
  json::object utf8 = Hello();
  utf8["client"] = wide;
  CHECK(CodeOf(ParseHello(utf8)) == "ok");

  json::object finish;
  finish["kv_request_id"] = Chars(kMaxRequestStringChars);
  CHECK(CodeOf(ParseFinish(finish)) == "ok");
  finish["kv_request_id"] = Chars(kMaxRequestStringChars + 1);
  CHECK(CodeOf(ParseFinish(finish)) == "bad_request");
}

TEST_CASE("block_len: 1 ..= kMaxRequestBlockLen") {
  json::object hello = Hello();
  hello["block_len"] = 1;
  CHECK(CodeOf(ParseHello(hello)) == "ok");
  hello["block_len"] = kMaxRequestBlockLen;
  CHECK(CodeOf(ParseHello(hello)) == "ok");
  hello["block_len"] = kMaxRequestBlockLen + 1;
  CHECK(CodeOf(ParseHello(hello)) == "bad_request");
}

TEST_CASE("num_blocks: 1 ..= 2^31; path: 1 ..= 4096 characters") {
  json::object region = Request(R"({"fd":true})");
  region["num_blocks"] = kMaxNumBlocks;
  CHECK(CodeOf(ParseRegisterRegion(region)) == "ok");
  region["num_blocks"] = kMaxNumBlocks + 1;
  CHECK(CodeOf(ParseRegisterRegion(region)) == "bad_request");

  json::object by_path = Request(R"({"num_blocks":1})");
  by_path["path"] = Chars(kMaxPathChars);
  CHECK(CodeOf(ParseRegisterRegion(by_path)) == "ok");
  by_path["path"] = Chars(kMaxPathChars + 1);
  CHECK(CodeOf(ParseRegisterRegion(by_path)) == "bad_request");
  by_path["path"] = "";
  CHECK(CodeOf(ParseRegisterRegion(by_path)) == "bad_request");
}

TEST_CASE("wait_ms: 0 ..= 60000, for lookup and poll") {
  json::object poll;
  poll["wait_ms"] = 0;
  CHECK(CodeOf(ParsePoll(poll)) == "ok");
  poll["wait_ms"] = kMaxWaitMs;
  CHECK(CodeOf(ParsePoll(poll)) == "ok");
  poll["wait_ms"] = kMaxWaitMs + 1;
  CHECK(CodeOf(ParsePoll(poll)) == "bad_request");

  json::object lookup = Request(R"({"peer":"h:1","kv_request_id":"r","keys":[]})");
  lookup["wait_ms"] = kMaxWaitMs;
  CHECK(CodeOf(ParseLookup(lookup)) == "ok");
  lookup["wait_ms"] = kMaxWaitMs + 1;
  CHECK(CodeOf(ParseLookup(lookup)) == "bad_request");
}

TEST_CASE("peer: a port 1 ..= 65535 and at most 4096 characters") {
  json::object request;
  request["peer"] = "h:65535";
  CHECK(CodeOf(ParsePeerRequest(request)) == "ok");
  request["peer"] = "h:65536";
  CHECK(CodeOf(ParsePeerRequest(request)) == "bad_request");
  request["peer"] = "h:1";
  CHECK(CodeOf(ParsePeerRequest(request)) == "ok");
  const std::string port = ":5710";
  request["peer"] = Chars(kMaxRequestStringChars - port.size()) + port;
  CHECK(CodeOf(ParsePeerRequest(request)) == "ok");
  request["peer"] = Chars(kMaxRequestStringChars + 1 - port.size()) + port;
  CHECK(CodeOf(ParsePeerRequest(request)) == "bad_request");
}

TEST_CASE("keys: at most 65536 per request, 1 ..= 4096 bytes each") {
  json::object unpublish;
  unpublish["keys"] = HexKeys(kMaxRequestListItems, 1);
  CHECK(CodeOf(ParseUnpublish(unpublish)) == "ok");
  unpublish["keys"] = HexKeys(kMaxRequestListItems + 1, 1);
  CHECK(CodeOf(ParseUnpublish(unpublish)) == "bad_request");
  unpublish["keys"] = HexKeys(1, kMaxRequestKeyBytes);
  CHECK(CodeOf(ParseUnpublish(unpublish)) == "ok");
  unpublish["keys"] = HexKeys(1, kMaxRequestKeyBytes + 1);
  CHECK(CodeOf(ParseUnpublish(unpublish)) == "bad_request");
}

TEST_CASE("block_ids: at most 65536, paired with keys, for publish, load and store") {
  json::object publish;
  publish["keys"] = HexKeys(kMaxRequestListItems, 1);
  publish["block_ids"] = BlockIds(kMaxRequestListItems);
  CHECK(CodeOf(ParsePublish(publish)) == "ok");
  publish["block_ids"] = BlockIds(kMaxRequestListItems + 1);
  CHECK(CodeOf(ParsePublish(publish)) == "bad_request");

  json::object load = Request(R"({"job_id":1,"peer":"h:1","kv_request_id":"r"})");
  load["keys"] = HexKeys(kMaxRequestListItems, 1);
  load["block_ids"] = BlockIds(kMaxRequestListItems);
  CHECK(CodeOf(ParseLoad(load)) == "ok");
  load["keys"] = HexKeys(kMaxRequestListItems + 1, 1);
  load["block_ids"] = BlockIds(kMaxRequestListItems + 1);
  CHECK(CodeOf(ParseLoad(load)) == "bad_request");

  json::object store = Request(R"({"job_id":1,"kv_request_id":"r"})");
  store["keys"] = HexKeys(1, 1);
  store["block_ids"] = json::array{std::numeric_limits<uint64_t>::max()};  // the region bounds it, later
  CHECK(CodeOf(ParseStore(store)) == "ok");
}

// ---- the docs' table of field rules ------------------------------------------

std::string ReadDoc() {
  std::ifstream in(KVPEER_CONTROL_API_DOC, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// 67108864 -> "67,108,864", as the docs write large numbers.
std::string Grouped(uint64_t value) {
  std::string digits = std::to_string(value);
  for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(static_cast<size_t>(at), ",");
  return digits;
}

// The row of `field` in the table of field rules ("| `field` | rule |").
std::string Row(const std::string& doc, const std::string& field) {
  const size_t at = doc.find("\n| `" + field + "` |");
  REQUIRE(at != std::string::npos);
  return doc.substr(at + 1, doc.find('\n', at + 1) - at - 1);
}

bool Has(const std::string& row, const std::string& text) { return row.find(text) != std::string::npos; }

TEST_CASE("docs/control-api.md states the bounds of request_limits.h") {
  const std::string doc = ReadDoc();
  const std::string chars = std::to_string(kMaxRequestStringChars);
  CHECK(Has(Row(doc, "client"), "1 ..= " + chars + " characters"));
  CHECK(Has(Row(doc, "config_fingerprint"), "0 ..= " + chars + " characters"));
  CHECK(Has(Row(doc, "kv_request_id`, `hash_seed"), "1 ..= " + chars + " characters"));
  CHECK(Has(Row(doc, "peer"), "at most " + chars + " characters"));
  CHECK(Has(Row(doc, "block_len"), "1 ..= " + Grouped(kMaxRequestBlockLen)));
  CHECK(Has(Row(doc, "keys"), "0 ..= " + Grouped(kMaxRequestListItems) + " keys"));
  CHECK(Has(Row(doc, "keys"), "1 ..= " + std::to_string(kMaxRequestKeyBytes) + " bytes"));
  REQUIRE(kMaxNumBlocks == uint64_t{1} << 31);  // the docs write it as a power of two
  CHECK(Has(Row(doc, "num_blocks"), "1 ..= 2^31"));
  CHECK(Has(Row(doc, "path"), "1 ..= " + std::to_string(kMaxPathChars) + " characters"));
  CHECK(Has(Row(doc, "wait_ms"), "0 ..= " + std::to_string(kMaxWaitMs)));
}

}  // namespace
}  // namespace kvpeer::daemon
