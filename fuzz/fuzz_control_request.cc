// libFuzzer target: the control API's request parsing (docs/control-api.md).
//
// The daemon reads NDJSON lines from the control socket, parses each with
// Boost.JSON, checks that it is an object with a string `op`, and then the
// op's parser (daemon/api/request_parsers.h) turns the object into the op's
// validated struct; the rules of each field (strings counted in characters,
// "host:port" peers, integer ranges, lowercase hex keys, block ids,
// parallel arrays) and their bounds (daemon/api/request_limits.h) live
// there. This target runs that path without sockets: the line splitting
// lives inside the socket reader (ControlConnection::Split), so a local
// splitter with the same rule (lines end at '\n', a line longer than the
// limit ends the stream) stands in for it; the parse and the parsers are
// the daemon's own code. Which ops exist comes from the daemon's op table
// (daemon/api/control_ops.h); the first input traps unless the parsers
// below cover exactly the table's ops, so the two cannot drift apart.
//
// Input: byte 0 picks how the rest is split into chunks; the rest is a
// stream of request lines. Properties, each a __builtin_trap() on failure:
//   * splitting the stream in chunks gives the same lines as splitting it
//     whole;
//   * a refused request is a bad_request naming one of the op's fields
//     (or, for register_region, its path-or-fd rule); the field is the
//     first failing one: the request cut down to that field and the ones
//     read before it fails the same way (ops whose rules span fields after
//     the reads, hello and register_region, are checked by name only);
//   * an op outside the table gets the daemon's unknown_op error, and a
//     known one its shutdown or missing-hello refusal, from the table;
//   * what a parser accepts obeys the documented rules (lengths in
//     characters, ranges, key sizes, list sizes, equal lengths), and keys
//     and block ids are exactly the request's values (hex round trip);
//   * the error the daemon would answer with (code and message, as
//     ControlServer::Answer puts them in the response line) serializes to
//     one line of valid JSON, UTF-8 included, that parses back unchanged.
//     (The rest of the response line, the echoed `id` included, is built in
//     ControlServer, which needs the event loop, so it is not covered here.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "base/hex.h"
#include "daemon/api/api_error.h"
#include "daemon/api/control_ops.h"
#include "daemon/api/request_limits.h"
#include "daemon/api/request_parsers.h"
#include "fuzz/chunk_sizes.h"
#include "protocol/codec.h"
#include "protocol/json_fields.h"
#include "protocol/limits.h"

namespace {

namespace json = boost::json;
using kvpeer::Status;
using kvpeer::daemon::ApiErrorCode;
using kvpeer::daemon::CheckOpAllowed;
using kvpeer::daemon::ControlOp;
using kvpeer::daemon::ControlOps;
using kvpeer::protocol::Key;
namespace api = kvpeer::daemon;

// The daemon allows 16 MiB per line; a small limit lets short inputs reach
// the over-long case.
constexpr size_t kMaxLineBytes = 512;
constexpr size_t kMaxLines = 64;

void Check(bool property) {
  if (!property) __builtin_trap();
}

size_t CountChars(std::string_view utf8) {
  return static_cast<size_t>(
      std::count_if(utf8.begin(), utf8.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// ---- line splitting --------------------------------------------------------

struct Lines {
  std::vector<std::string> complete;
  bool too_large = false;
};

class LineSplitter {
 public:
  // False once a line exceeded the limit; nothing is accepted after that.
  bool Feed(std::span<const uint8_t> bytes) {
    if (out_.too_large) return false;
    const char* data = reinterpret_cast<const char*>(bytes.data());
    size_t size = bytes.size();
    while (size > 0) {
      const void* found = std::memchr(data, '\n', size);
      const char* newline = static_cast<const char*>(found);
      const size_t take = newline != nullptr ? static_cast<size_t>(newline - data) : size;
      if (partial_.size() + take > kMaxLineBytes) {
        out_.too_large = true;
        return false;
      }
      partial_.append(data, take);
      if (newline == nullptr) break;
      out_.complete.push_back(std::move(partial_));
      partial_.clear();
      data += take + 1;
      size -= take + 1;
    }
    return true;
  }
  const Lines& lines() const { return out_; }

 private:
  std::string partial_;
  Lines out_;
};

// ---- what accepted fields must satisfy --------------------------------------

void CheckString(const json::object& request, std::string_view name, size_t min_chars, size_t max_chars,
                 const std::string& value) {
  const json::string& text = request.at(name).as_string();
  Check(std::string_view(text) == value);
  const size_t chars = CountChars(value);
  Check(chars >= min_chars && chars <= max_chars);
}

// kv_request_id, hash_seed: they go on the wire.
void CheckIdString(const json::object& request, std::string_view name, const std::string& value) {
  CheckString(request, name, 1, api::kMaxRequestStringChars, value);
  Check(kvpeer::protocol::ControlCharacterProblem(value).ok());
}

void CheckPeer(const json::object& request, const std::string& peer) {
  Check(std::string_view(request.at("peer").as_string()) == peer);
  const size_t colon = peer.rfind(':');
  Check(colon != std::string::npos && colon > 0 && colon + 1 < peer.size());
  // Digits only, of value 1 ..= 65535 (leading zeros pass: "h:080" is port 80).
  uint64_t port = 0;
  for (char c : std::string_view(peer).substr(colon + 1)) {
    Check(c >= '0' && c <= '9');
    port = std::min<uint64_t>(port * 10 + static_cast<uint64_t>(c - '0'), 1000000);
  }
  Check(port >= 1 && port <= 65535 && peer.size() <= api::kMaxRequestStringChars);
}

void CheckUint(const json::value& value, uint64_t max, uint64_t got) {
  Check(got <= max);
  if (const uint64_t* u = value.if_uint64())
    Check(*u == got);
  else
    Check(value.is_int64() && value.get_int64() >= 0 && static_cast<uint64_t>(value.get_int64()) == got);
}

// An optional integer: absent is `fallback`.
void CheckOptionalUint(const json::object& request, std::string_view name, uint64_t max, uint64_t got,
                       uint64_t fallback) {
  if (request.contains(name))
    CheckUint(request.at(name), max, got);
  else
    Check(got == fallback);
}

// An optional bool: absent is false.
void CheckOptionalBool(const json::object& request, std::string_view name, bool got) {
  Check(request.contains(name) ? request.at(name).as_bool() == got : !got);
}

void CheckJobId(const json::object& request, int64_t job_id) {
  const json::value& value = request.at("job_id");
  if (const int64_t* i = value.if_int64())
    Check(*i == job_id);
  else
    Check(value.is_uint64() && static_cast<int64_t>(value.get_uint64()) == job_id && job_id >= 0);
}

void CheckKeys(const json::object& request, size_t min_items, const std::vector<Key>& keys) {
  const json::array& items = request.at("keys").as_array();
  Check(keys.size() == items.size() && keys.size() >= min_items && keys.size() <= api::kMaxRequestListItems);
  for (size_t i = 0; i < keys.size(); ++i) {
    Check(!keys[i].empty() && keys[i].size() <= api::kMaxRequestKeyBytes);
    Check(kvpeer::ToHex(keys[i]) == std::string_view(items[i].as_string()));
  }
}

// Block ids pair with keys: as many, each the request's value.
void CheckBlockIds(const json::object& request, size_t min_items, const std::vector<uint64_t>& block_ids, size_t keys) {
  const json::array& items = request.at("block_ids").as_array();
  Check(block_ids.size() == items.size() && block_ids.size() >= min_items && block_ids.size() == keys);
  for (size_t i = 0; i < items.size(); ++i) CheckUint(items[i], UINT64_MAX, block_ids[i]);
}

void CheckHello(const json::object& r, const api::HelloRequest& hello) {
  CheckString(r, "client", 1, api::kMaxRequestStringChars, hello.client);
  CheckUint(r.at("block_len"), api::kMaxRequestBlockLen, hello.block_len);
  Check(hello.block_len >= 1);
  CheckString(r, "config_fingerprint", 0, api::kMaxRequestStringChars, hello.config_fingerprint);
  CheckIdString(r, "hash_seed", hello.hash_seed);
}

void CheckRegisterRegion(const json::object& r, const api::RegisterRegionRequest& region) {
  CheckOptionalBool(r, "fd", region.by_fd());  // exactly one of path and fd: true
  Check(region.path.has_value() == r.contains("path"));
  if (region.path) CheckString(r, "path", 1, api::kMaxPathChars, *region.path);
  CheckUint(r.at("num_blocks"), api::kMaxNumBlocks, region.num_blocks);
  Check(region.num_blocks >= 1);
  CheckOptionalUint(r, "offset", UINT64_MAX, region.offset, 0);
}

void CheckPublish(const json::object& r, const api::PublishRequest& publish) {
  CheckKeys(r, 0, publish.keys);
  CheckBlockIds(r, 0, publish.block_ids, publish.keys.size());
  CheckOptionalBool(r, "seal", publish.seal);
}

void CheckUnpublish(const json::object& r, const api::UnpublishRequest& unpublish) { CheckKeys(r, 0, unpublish.keys); }

void CheckLookup(const json::object& r, const api::LookupRequest& lookup) {
  CheckPeer(r, lookup.peer);
  CheckIdString(r, "kv_request_id", lookup.kv_request_id);
  CheckKeys(r, 0, lookup.keys);
  CheckOptionalBool(r, "flush", lookup.flush);
  CheckOptionalUint(r, "wait_ms", api::kMaxWaitMs, lookup.wait_ms, 0);
}

void CheckLoad(const json::object& r, const api::LoadRequest& load) {
  CheckJobId(r, load.job_id);
  CheckPeer(r, load.peer);
  CheckIdString(r, "kv_request_id", load.kv_request_id);
  CheckKeys(r, 1, load.keys);
  CheckBlockIds(r, 1, load.block_ids, load.keys.size());
}

void CheckStore(const json::object& r, const api::StoreRequest& store) {
  CheckJobId(r, store.job_id);
  CheckIdString(r, "kv_request_id", store.kv_request_id);
  CheckKeys(r, 1, store.keys);
  CheckBlockIds(r, 1, store.block_ids, store.keys.size());
  CheckOptionalBool(r, "seal", store.seal);
}

void CheckFinish(const json::object& r, const api::FinishRequest& finish) {
  CheckIdString(r, "kv_request_id", finish.kv_request_id);
}

void CheckPoll(const json::object& r, const api::PollRequest& poll) {
  CheckOptionalUint(r, "wait_ms", api::kMaxWaitMs, poll.wait_ms, 0);
}

void CheckPeerRequest(const json::object& r, const api::PeerRequest& peer) { CheckPeer(r, peer.peer); }

// ---- the ops' parsers --------------------------------------------------------

// Parses with the daemon's parser; what it accepts is checked by `check`.
template <auto parse, auto check>
Status ParseAndCheck(const json::object& request) {
  auto parsed = parse(request);
  if (parsed.ok()) check(request, *parsed);
  return parsed.status();
}

struct OpSpec {
  std::string_view op;
  std::vector<std::string_view> fields;  // in the order the parser reads them
  Status (*parse)(const json::object&);
  // A failure names its field, and the request cut down to the fields up
  // to it fails the same (false: rules checked after every read).
  bool first_failure_is_by_order = true;
};

// Flush, status and metrics read nothing.
Status NoFields(const json::object&) { return Status::Ok(); }

const std::vector<OpSpec>& Ops() {
  static const std::vector<OpSpec> ops = {
      {"hello",
       {"client", "block_len", "config_fingerprint", "hash_seed"},
       ParseAndCheck<api::ParseHello, CheckHello>,
       false},
      {"register_region",
       {"fd", "path", "num_blocks", "offset"},
       ParseAndCheck<api::ParseRegisterRegion, CheckRegisterRegion>,
       false},
      {"publish", {"keys", "block_ids", "seal"}, ParseAndCheck<api::ParsePublish, CheckPublish>},
      {"unpublish", {"keys"}, ParseAndCheck<api::ParseUnpublish, CheckUnpublish>},
      {"lookup", {"peer", "kv_request_id", "keys", "flush", "wait_ms"}, ParseAndCheck<api::ParseLookup, CheckLookup>},
      {"load", {"job_id", "peer", "kv_request_id", "keys", "block_ids"}, ParseAndCheck<api::ParseLoad, CheckLoad>},
      {"store", {"job_id", "kv_request_id", "keys", "block_ids", "seal"}, ParseAndCheck<api::ParseStore, CheckStore>},
      {"finish", {"kv_request_id"}, ParseAndCheck<api::ParseFinish, CheckFinish>},
      {"poll", {"wait_ms"}, ParseAndCheck<api::ParsePoll, CheckPoll>},
      {"connect", {"peer"}, ParseAndCheck<api::ParsePeerRequest, CheckPeerRequest>},
      {"disconnect", {"peer"}, ParseAndCheck<api::ParsePeerRequest, CheckPeerRequest>},
      {"flush", {}, NoFields},
      {"status", {}, NoFields},
      {"metrics", {}, NoFields},
  };
  return ops;
}

const OpSpec* SpecOf(std::string_view op) {
  const auto& ops = Ops();
  auto spec = std::find_if(ops.begin(), ops.end(), [op](const OpSpec& s) { return s.op == op; });
  return spec != ops.end() ? &*spec : nullptr;
}

// The parsers above name exactly the op table's ops, each once.
void CheckSpecsCoverOpTable() {
  Check(Ops().size() == ControlOps().size());
  for (const ControlOp& row : ControlOps()) Check(SpecOf(row.name) != nullptr);
}

bool SameStatus(const Status& a, const Status& b) { return a.code() == b.code() && a.message() == b.message(); }

// The index in spec.fields of the field a refusal names ("field 'keys[3]'
// ..." names keys), if any.
std::optional<size_t> NamedField(const OpSpec& spec, const std::string& message) {
  constexpr std::string_view kPrefix = "field '";
  if (message.rfind(kPrefix, 0) != 0) return std::nullopt;
  const size_t end = message.find_first_of("'[", kPrefix.size());
  if (end == std::string::npos) return std::nullopt;
  const std::string_view name = std::string_view(message).substr(kPrefix.size(), end - kPrefix.size());
  auto found = std::find(spec.fields.begin(), spec.fields.end(), name);
  if (found == spec.fields.end()) return std::nullopt;
  return static_cast<size_t>(found - spec.fields.begin());
}

// A refusal names a field of the op, and is the first failure in read order.
void CheckRefusal(const OpSpec& spec, const json::object& request, const Status& status) {
  Check(status.code() == Status::Code::kInvalid);
  const std::optional<size_t> named = NamedField(spec, status.message());
  if (spec.op == "register_region" && status.message().rfind("give either 'path' or 'fd'", 0) == 0) return;
  Check(named.has_value());
  if (!spec.first_failure_is_by_order) return;
  json::object cut;
  for (size_t i = 0; i <= *named; ++i) {
    if (const json::value* value = request.if_contains(spec.fields[i])) cut[spec.fields[i]] = *value;
  }
  // block_ids' equal-length rule needs keys, which precede it in every op.
  Check(SameStatus(spec.parse(cut), status));
}

// ---- requests and responses --------------------------------------------------

// The error of a response line as ControlServer::Answer builds it: the line
// must be one line of valid JSON (UTF-8 included) that the engine's parser
// reads back unchanged, whatever the request held.
void CheckErrorResponse(const Status& status) {
  if (status.ok()) return;
  json::object out;
  out["ok"] = false;
  out["error"] = json::object{{"code", ApiErrorCode(status)}, {"message", status.message()}};
  const std::string line = json::serialize(out);
  Check(line.find('\n') == std::string::npos);
  json::error_code ec;
  const json::value back = json::parse(line, ec);
  Check(!ec && back == out);
}

// One request line, from parse to the readers' verdict.
void HandleLine(const std::string& line) {
  json::error_code ec;
  const json::value parsed = json::parse(line, ec);  // as ControlServer::HandleLine parses it
  if (ec || !parsed.is_object()) return;
  const json::object& request = parsed.get_object();
  const json::value* op = request.if_contains("op");
  if (op == nullptr || !op->is_string()) return;
  const ControlOp* row = kvpeer::daemon::FindControlOp(op->get_string());
  if (row == nullptr) {
    CheckErrorResponse(kvpeer::daemon::UnknownOp(op->get_string()));
    return;
  }
  CheckErrorResponse(CheckOpAllowed(*row, /*shutting_down=*/true, /*has_engine=*/false));
  const OpSpec* spec = SpecOf(row->name);

  const Status status = spec->parse(request);
  Check(SameStatus(spec->parse(request), status));  // no state between calls
  if (!status.ok()) CheckRefusal(*spec, request, status);
  CheckErrorResponse(status);
}

using kvpeer::fuzz::ChunkSizes;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool covered = (CheckSpecsCoverOpTable(), true);
  (void)covered;
  if (size == 0) return 0;
  const std::span<const uint8_t> stream(data + 1, size - 1);

  LineSplitter whole;
  whole.Feed(stream);
  LineSplitter chunked;
  ChunkSizes chunks(data[0]);
  for (size_t at = 0; at < stream.size();) {
    const size_t n = std::min(chunks.Next(), stream.size() - at);
    if (!chunked.Feed(stream.subspan(at, n))) break;
    at += n;
  }
  Check(whole.lines().complete == chunked.lines().complete && whole.lines().too_large == chunked.lines().too_large);

  const std::vector<std::string>& lines = whole.lines().complete;
  for (size_t i = 0; i < lines.size() && i < kMaxLines; ++i) {
    Check(lines[i].size() <= kMaxLineBytes && lines[i].find('\n') == std::string::npos);
    HandleLine(lines[i]);
  }
  return 0;
}
