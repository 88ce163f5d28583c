// libFuzzer target: the control API's request parsing (docs/control-api.md).
//
// The daemon reads NDJSON lines from the control socket, parses each with
// Boost.JSON, checks that it is an object with a string `op`, and then each
// op reads its fields with RequestReader (daemon/api/json_request.h), which holds
// every field rule: strings counted in characters, "host:port" peers, integer
// ranges, lowercase hex keys, block ids, parallel arrays. This target runs
// that path without sockets: the line splitting lives inside the socket
// reader (ControlConnection::Split), so a local splitter with the same rule
// (lines end at '\n', a line longer than the limit ends the stream) stands
// in for it; the parse and every reader are the daemon's own code, read in
// the order each op reads them. Which ops exist comes from the daemon's op
// table (daemon/api/control_ops.h): the reads below are kept per op by hand
// (they run inside the handlers, which need the event loop), and the first
// input traps unless they cover exactly the table's ops, so the two cannot
// drift apart.
//
// Input: byte 0 picks how the rest is split into chunks; the rest is a
// stream of request lines. Properties, each a __builtin_trap() on failure:
//   * splitting the stream in chunks gives the same lines as splitting it
//     whole;
//   * a reader that failed reports the first failing field of the op, with
//     exactly the status that field alone gets (later reads change nothing),
//     and the failure is a bad_request naming that field;
//   * an op outside the table gets the daemon's unknown_op error, and a
//     known one its shutdown or missing-hello refusal, from the table;
//   * what the readers accept obeys the documented rules (lengths in
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
#include "daemon/api/json_request.h"
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
using kvpeer::daemon::RequestReader;
using kvpeer::protocol::Key;

// The daemon allows 16 MiB per line; a small limit lets short inputs reach
// the over-long case.
constexpr size_t kMaxLineBytes = 512;
constexpr size_t kMaxLines = 64;
// The daemon's limits for fields it reads (engine_session.cc).
constexpr uint64_t kMaxNumBlocks = uint64_t{1} << 31;
constexpr uint64_t kMaxWaitMs = 60000;
constexpr size_t kMaxPathChars = 4096;

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

// ---- the ops' field reads ----------------------------------------------------

// Every field any op reads.
struct Fields {
  std::string client, config_fingerprint, hash_seed, peer, kv_request_id;
  uint64_t block_len = 0, num_blocks = 0;
  int64_t job_id = 0;
  std::optional<bool> fd, flush, seal;
  std::optional<std::string> path;
  std::optional<uint64_t> offset, wait_ms;
  std::vector<Key> keys;
  std::vector<uint64_t> block_ids;
};

using Read = void (*)(RequestReader&, Fields&);

struct OpSpec {
  std::string_view op;
  std::vector<std::string_view> fields;  // field names, in read order
  std::vector<Read> reads;               // one per field
  bool same_length = false;              // block_ids pairs with keys
};

// The reads of each op, in the daemon's order (engine_registry.cc Hello,
// engine_session.cc, control_server.cc Connect / Disconnect). Flush,
// status and metrics read nothing.
const std::vector<OpSpec>& Ops() {
  using kvpeer::protocol::kMaxBlockLen;
  using kvpeer::protocol::kMaxStringChars;
  static const std::vector<OpSpec> ops = {
      {"hello",
       {"client", "block_len", "config_fingerprint", "hash_seed"},
       {[](RequestReader& r, Fields& f) { r.String("client", 1, kMaxStringChars, &f.client); },
        [](RequestReader& r, Fields& f) { r.Uint("block_len", kMaxBlockLen, &f.block_len); },
        [](RequestReader& r, Fields& f) { r.String("config_fingerprint", 0, kMaxStringChars, &f.config_fingerprint); },
        [](RequestReader& r, Fields& f) { r.IdString("hash_seed", &f.hash_seed); }}},
      {"register_region",
       {"fd", "path", "num_blocks", "offset"},
       {[](RequestReader& r, Fields& f) { r.OptionalBool("fd", &f.fd); },
        [](RequestReader& r, Fields& f) { r.OptionalString("path", 1, kMaxPathChars, &f.path); },
        [](RequestReader& r, Fields& f) { r.Uint("num_blocks", kMaxNumBlocks, &f.num_blocks); },
        [](RequestReader& r, Fields& f) { r.OptionalUint("offset", UINT64_MAX, &f.offset); }}},
      {"publish",
       {"keys", "block_ids", "seal"},
       {[](RequestReader& r, Fields& f) { r.Keys("keys", 0, &f.keys); },
        [](RequestReader& r, Fields& f) { r.BlockIds("block_ids", 0, &f.block_ids); },
        [](RequestReader& r, Fields& f) { r.OptionalBool("seal", &f.seal); }},
       true},
      {"unpublish", {"keys"}, {[](RequestReader& r, Fields& f) { r.Keys("keys", 0, &f.keys); }}},
      {"lookup",
       {"peer", "kv_request_id", "keys", "flush", "wait_ms"},
       {[](RequestReader& r, Fields& f) { r.Peer("peer", &f.peer); },
        [](RequestReader& r, Fields& f) { r.IdString("kv_request_id", &f.kv_request_id); },
        [](RequestReader& r, Fields& f) { r.Keys("keys", 0, &f.keys); },
        [](RequestReader& r, Fields& f) { r.OptionalBool("flush", &f.flush); },
        [](RequestReader& r, Fields& f) { r.OptionalUint("wait_ms", kMaxWaitMs, &f.wait_ms); }}},
      {"load",
       {"job_id", "peer", "kv_request_id", "keys", "block_ids"},
       {[](RequestReader& r, Fields& f) { r.Int("job_id", &f.job_id); },
        [](RequestReader& r, Fields& f) { r.Peer("peer", &f.peer); },
        [](RequestReader& r, Fields& f) { r.IdString("kv_request_id", &f.kv_request_id); },
        [](RequestReader& r, Fields& f) { r.Keys("keys", 1, &f.keys); },
        [](RequestReader& r, Fields& f) { r.BlockIds("block_ids", 1, &f.block_ids); }},
       true},
      {"store",
       {"job_id", "kv_request_id", "keys", "block_ids", "seal"},
       {[](RequestReader& r, Fields& f) { r.Int("job_id", &f.job_id); },
        [](RequestReader& r, Fields& f) { r.IdString("kv_request_id", &f.kv_request_id); },
        [](RequestReader& r, Fields& f) { r.Keys("keys", 1, &f.keys); },
        [](RequestReader& r, Fields& f) { r.BlockIds("block_ids", 1, &f.block_ids); },
        [](RequestReader& r, Fields& f) { r.OptionalBool("seal", &f.seal); }},
       true},
      {"finish", {"kv_request_id"}, {[](RequestReader& r, Fields& f) {
         r.IdString("kv_request_id", &f.kv_request_id);
       }}},
      {"poll", {"wait_ms"}, {[](RequestReader& r, Fields& f) { r.OptionalUint("wait_ms", kMaxWaitMs, &f.wait_ms); }}},
      {"connect", {"peer"}, {[](RequestReader& r, Fields& f) { r.Peer("peer", &f.peer); }}},
      {"disconnect", {"peer"}, {[](RequestReader& r, Fields& f) { r.Peer("peer", &f.peer); }}},
      {"flush", {}, {}},
      {"status", {}, {}},
      {"metrics", {}, {}},
  };
  return ops;
}

const OpSpec* SpecOf(std::string_view op) {
  const auto& ops = Ops();
  auto spec = std::find_if(ops.begin(), ops.end(), [op](const OpSpec& s) { return s.op == op; });
  return spec != ops.end() ? &*spec : nullptr;
}

// The reads above name exactly the op table's ops, each once.
void CheckSpecsCoverOpTable() {
  Check(Ops().size() == ControlOps().size());
  for (const ControlOp& row : ControlOps()) Check(SpecOf(row.name) != nullptr);
}

bool SameStatus(const Status& a, const Status& b) { return a.code() == b.code() && a.message() == b.message(); }

// ---- what accepted fields must satisfy --------------------------------------

void CheckString(const json::object& request, std::string_view name, size_t min_chars, size_t max_chars,
                 const std::string& value) {
  const json::string& text = request.at(name).as_string();
  Check(std::string_view(text) == value);
  const size_t chars = CountChars(value);
  Check(chars >= min_chars && chars <= max_chars);
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
  Check(port >= 1 && port <= 65535 && peer.size() <= kvpeer::protocol::kMaxStringChars);
}

void CheckUint(const json::value& value, uint64_t max, uint64_t got) {
  Check(got <= max);
  if (const uint64_t* u = value.if_uint64())
    Check(*u == got);
  else
    Check(value.is_int64() && value.get_int64() >= 0 && static_cast<uint64_t>(value.get_int64()) == got);
}

void CheckAccepted(const OpSpec& spec, const json::object& request, const Fields& f) {
  using kvpeer::protocol::kMaxKeyBytes;
  using kvpeer::protocol::kMaxListItems;
  using kvpeer::protocol::kMaxStringChars;
  const bool has_keys = std::find(spec.fields.begin(), spec.fields.end(), "keys") != spec.fields.end();
  const bool has_ids = std::find(spec.fields.begin(), spec.fields.end(), "block_ids") != spec.fields.end();
  const size_t min_items = spec.op == "load" || spec.op == "store" ? 1 : 0;
  if (has_keys) {
    const json::array& items = request.at("keys").as_array();
    Check(f.keys.size() == items.size() && f.keys.size() >= min_items && f.keys.size() <= kMaxListItems);
    for (size_t i = 0; i < f.keys.size(); ++i) {
      Check(!f.keys[i].empty() && f.keys[i].size() <= kMaxKeyBytes);
      Check(kvpeer::ToHex(f.keys[i]) == std::string_view(items[i].as_string()));
    }
  }
  if (has_ids) {
    const json::array& items = request.at("block_ids").as_array();
    Check(f.block_ids.size() == items.size() && f.block_ids.size() >= min_items);
    for (size_t i = 0; i < items.size(); ++i) CheckUint(items[i], UINT64_MAX, f.block_ids[i]);
  }
  if (spec.same_length) Check(f.keys.size() == f.block_ids.size());
  for (std::string_view field : spec.fields) {
    if (field == "client" || field == "hash_seed") {
      CheckString(request, field, 1, kMaxStringChars, field == "client" ? f.client : f.hash_seed);
      if (field == "hash_seed") Check(kvpeer::protocol::ControlCharacterProblem(f.hash_seed).ok());
    } else if (field == "config_fingerprint") {
      CheckString(request, field, 0, kMaxStringChars, f.config_fingerprint);
    } else if (field == "kv_request_id") {
      CheckString(request, field, 1, 4096, f.kv_request_id);
      Check(kvpeer::protocol::ControlCharacterProblem(f.kv_request_id).ok());  // it goes on the wire
    } else if (field == "peer") {
      CheckPeer(request, f.peer);
    } else if (field == "block_len") {
      CheckUint(request.at(field), kvpeer::protocol::kMaxBlockLen, f.block_len);
    } else if (field == "num_blocks") {
      CheckUint(request.at(field), kMaxNumBlocks, f.num_blocks);
    } else if (field == "job_id") {
      const json::value& value = request.at(field);
      if (const int64_t* i = value.if_int64())
        Check(*i == f.job_id);
      else
        Check(value.is_uint64() && static_cast<int64_t>(value.get_uint64()) == f.job_id && f.job_id >= 0);
    } else if (field == "path") {
      Check(f.path.has_value() == request.contains(field));
      if (f.path) CheckString(request, field, 1, kMaxPathChars, *f.path);
    } else if (field == "offset" || field == "wait_ms") {
      const std::optional<uint64_t>& got = field == "offset" ? f.offset : f.wait_ms;
      Check(got.has_value() == request.contains(field));
      if (got) CheckUint(request.at(field), field == "offset" ? UINT64_MAX : kMaxWaitMs, *got);
    } else if (field == "fd" || field == "flush" || field == "seal") {
      const std::optional<bool>& got = field == "fd" ? f.fd : field == "flush" ? f.flush : f.seal;
      Check(got.has_value() == request.contains(field));
      if (got) Check(request.at(field).as_bool() == *got);
    }
  }
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

  // The op's reads on one reader, as the daemon does them.
  RequestReader reader(request);
  Fields fields;
  for (Read read : spec->reads) read(reader, fields);
  if (spec->same_length) reader.SameLength("block_ids", fields.block_ids.size(), "keys", fields.keys.size());
  Check(reader.ok() == reader.status().ok());

  // Each field alone: the combined reader must report the first failure.
  std::optional<size_t> first_failing;
  Status first_status;
  for (size_t i = 0; i < spec->reads.size() && !first_failing; ++i) {
    RequestReader alone(request);
    Fields scratch;
    spec->reads[i](alone, scratch);
    if (!alone.ok()) {
      first_failing = i;
      first_status = alone.status();
    }
  }
  if (first_failing) {
    Check(SameStatus(reader.status(), first_status));
    Check(reader.status().code() == Status::Code::kInvalid);
    const std::string named = "field '" + std::string(spec->fields[*first_failing]);
    Check(reader.status().message().rfind(named, 0) == 0);
  } else if (!reader.ok()) {
    // Only the parallel-array rule can fail when every field passed alone.
    Check(spec->same_length && fields.keys.size() != fields.block_ids.size());
    Check(reader.status().message().rfind("field 'block_ids' must have as many items as 'keys'", 0) == 0);
  } else {
    CheckAccepted(*spec, request, fields);
  }
  CheckErrorResponse(reader.status());
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
