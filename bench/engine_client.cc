#include "bench/engine_client.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "bench/util.h"

namespace kvpeer::bench {

namespace json = boost::json;

// ---------------------------------------------------------------------------
// EngineClient

namespace {

kvpeer::Client Connected(const std::string& path) {
  kvpeer::Result<kvpeer::Client> client = kvpeer::Client::Connect(path);
  if (!client.ok()) throw BenchError(client.error().message);
  return std::move(client).value();
}

}  // namespace

EngineClient::EngineClient(const std::string& path) : path_(path), client_(Connected(path)) {}

void EngineClient::Send(std::string_view line, int fd) {
  kvpeer::Result<void> sent = client_.Send(kvpeer::Request{std::string(line), fd});
  if (!sent.ok()) throw BenchError(sent.error().message);
}

std::string EngineClient::ReadLine() {
  kvpeer::Result<std::string> line = client_.ReceiveLine();
  if (!line.ok()) throw BenchError(line.error().message);
  return std::move(line).value();
}

json::object EngineClient::Read() {
  const std::string line = ReadLine();
  boost::system::error_code ec;
  json::value value = json::parse(line, ec);
  if (ec || !value.is_object()) throw BenchError("kvpeerd at " + path_ + " answered with a non-object: " + line);
  return std::move(value.as_object());
}

json::object EngineClient::ReadOk(std::string_view what) {
  json::object answer = Read();
  const json::value* ok = answer.if_contains("ok");
  if (ok == nullptr || !ok->is_bool() || !ok->get_bool()) {
    throw BenchError(std::string(what) + " failed at " + path_ + ": " + json::serialize(answer));
  }
  return answer;
}

json::object EngineClient::Call(std::string_view line, std::string_view what, int fd) {
  Send(line, fd);
  return ReadOk(what);
}

// ---------------------------------------------------------------------------
// Requests

namespace request {
namespace {

void AppendStrings(std::string* out, const std::vector<std::string>& items) {
  out->push_back('[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->push_back('"');
    out->append(items[i]);
    out->push_back('"');
  }
  out->push_back(']');
}

void AppendInts(std::string* out, const std::vector<uint32_t>& items) {
  out->push_back('[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append(std::to_string(items[i]));
  }
  out->push_back(']');
}

std::string Quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

}  // namespace

std::string Hello(std::string_view client, uint64_t block_len, std::string_view fingerprint, std::string_view seed) {
  return "{\"op\":\"hello\",\"client\":" + Quoted(client) + ",\"block_len\":" + std::to_string(block_len) +
         ",\"config_fingerprint\":" + Quoted(fingerprint) + ",\"hash_seed\":" + Quoted(seed) + "}";
}

std::string RegisterFd(uint64_t num_blocks) {
  return "{\"op\":\"register_region\",\"fd\":true,\"num_blocks\":" + std::to_string(num_blocks) + "}";
}

std::string Publish(const std::vector<std::string>& keys, const std::vector<uint32_t>& block_ids, bool seal) {
  std::string out = "{\"op\":\"publish\",\"keys\":";
  AppendStrings(&out, keys);
  out += ",\"block_ids\":";
  AppendInts(&out, block_ids);
  if (seal) out += ",\"seal\":true";
  out += "}";
  return out;
}

std::string Lookup(std::string_view peer, std::string_view kv, const std::vector<std::string>& keys, bool flush,
                   int64_t wait_ms) {
  std::string out = "{\"op\":\"lookup\",\"peer\":" + Quoted(peer) + ",\"kv_request_id\":" + Quoted(kv) + ",\"keys\":";
  AppendStrings(&out, keys);
  if (flush) out += ",\"flush\":true";
  if (wait_ms > 0) out += ",\"wait_ms\":" + std::to_string(wait_ms);
  out += "}";
  return out;
}

std::string Flush() { return "{\"op\":\"flush\"}"; }

std::string Load(int64_t job_id, std::string_view peer, std::string_view kv, const std::vector<std::string>& keys,
                 const std::vector<uint32_t>& block_ids) {
  std::string out = "{\"op\":\"load\",\"job_id\":" + std::to_string(job_id) + ",\"peer\":" + Quoted(peer) +
                    ",\"kv_request_id\":" + Quoted(kv) + ",\"keys\":";
  AppendStrings(&out, keys);
  out += ",\"block_ids\":";
  AppendInts(&out, block_ids);
  out += "}";
  return out;
}

std::string Poll(int64_t wait_ms) { return "{\"op\":\"poll\",\"wait_ms\":" + std::to_string(wait_ms) + "}"; }

std::string Finish(std::string_view kv) { return "{\"op\":\"finish\",\"kv_request_id\":" + Quoted(kv) + "}"; }

std::string Connect(std::string_view peer) { return "{\"op\":\"connect\",\"peer\":" + Quoted(peer) + "}"; }

std::string Status() { return "{\"op\":\"status\"}"; }

}  // namespace request

LookupCounts CountLookup(const json::object& answer) {
  LookupCounts counts;
  const json::value* results = answer.if_contains("results");
  if (results == nullptr || !results->is_array()) throw BenchError("lookup answer without results");
  for (const json::value& item : results->get_array()) {
    if (!item.is_string()) throw BenchError("lookup result that is not a string");
    const json::string& text = item.get_string();
    if (text == "hit") {
      ++counts.hit;
    } else if (text == "miss") {
      ++counts.miss;
    } else {
      ++counts.retry;
    }
  }
  return counts;
}

std::string BlockKey(uint32_t space, uint32_t index) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const uint64_t value = (uint64_t{space} << 32) | index;
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) out[static_cast<size_t>(15 - i)] = kDigits[(value >> (4 * i)) & 0xf];
  return out;
}

namespace {

void AppendHex(std::string* out, uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int shift = 60; shift >= 0; shift -= 4) out->push_back(kDigits[(value >> shift) & 0xf]);
}

// splitmix64: well-spread 64-bit words, so the hash part looks random.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::string VllmStyleKey(uint32_t space, uint32_t index) {
  const uint64_t name = (uint64_t{space} << 32) | index;
  std::string out;
  out.reserve(72);
  for (uint64_t word = 0; word < 4; ++word) AppendHex(&out, Mix(name * 4 + word));
  out.append("00000000");  // group id 0
  return out;
}

// ---------------------------------------------------------------------------
// Region

namespace {

uint64_t Seed(uint64_t source_id) {
  uint64_t x = (source_id + 1) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 31;
  return x * 0xbf58476d1ce4e5b9ull;
}

constexpr uint64_t kStep = 0x2545f4914f6cdd1dull;

}  // namespace

Region::Region(uint64_t num_blocks, uint64_t block_len) : num_blocks_(num_blocks), block_len_(block_len) {
  const uint64_t bytes = num_blocks * block_len;
  fd_ = ::memfd_create("kvpeer-bench-region", MFD_CLOEXEC);
  if (fd_ < 0) throw BenchError("memfd_create: " + ErrnoText(errno));
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) throw BenchError("ftruncate region: " + ErrnoText(errno));
  void* mapping = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
  if (mapping == MAP_FAILED) throw BenchError("mmap region: " + ErrnoText(errno));
  base_ = static_cast<uint8_t*>(mapping);
  std::memset(base_, 0, bytes);  // allocates the pages now, not during a measurement
}

Region::~Region() {
  if (base_ != nullptr) ::munmap(base_, num_blocks_ * block_len_);
  if (fd_ >= 0) ::close(fd_);
}

std::span<uint8_t> Region::Block(uint64_t index) const {
  return {base_ + index * block_len_, static_cast<size_t>(block_len_)};
}

void Region::Fill(uint64_t index, uint64_t source_id) {
  auto block = Block(index);
  const uint64_t seed = Seed(source_id);
  const size_t words = block.size() / 8;
  uint64_t* out = reinterpret_cast<uint64_t*>(block.data());
  for (size_t i = 0; i < words; ++i) out[i] = seed + i * kStep;
  for (size_t i = words * 8; i < block.size(); ++i) block[i] = static_cast<uint8_t>(seed >> (i % 8));
}

bool Region::Verify(uint64_t index, uint64_t source_id) const {
  auto block = Block(index);
  const uint64_t seed = Seed(source_id);
  const size_t words = block.size() / 8;
  const uint64_t* in = reinterpret_cast<const uint64_t*>(block.data());
  uint64_t diff = 0;
  for (size_t i = 0; i < words; ++i) diff |= in[i] ^ (seed + i * kStep);
  for (size_t i = words * 8; i < block.size(); ++i) diff |= block[i] ^ static_cast<uint8_t>(seed >> (i % 8));
  return diff == 0;
}

void Region::Scribble(uint64_t index) {
  auto block = Block(index);
  std::memset(block.data(), 0xa5, block.size());
}

}  // namespace kvpeer::bench
