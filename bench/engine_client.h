// The benchmark's engine side of the control API (control-api.md): a
// blocking NDJSON client on one Unix-socket connection, and the shared-memory
// region an engine registers.
//
// EngineClient is the engines' C++ client (kvpeer/client.h) with the
// bench's error handling: every failure throws BenchError naming the step.
// It can pipeline: Send() several lines, then Read() their answers in order. The
// caller keeps the unanswered bytes below the socket buffers (a window of a
// few hundred short lines), since the daemon stops reading while its answers
// are not read.
//
// Requests are built as text by the functions below: keys, peers and request
// ids in the benchmark are plain ASCII without characters JSON must escape,
// so the lines are valid JSON as written. Answers are parsed with Boost.JSON.
//
// Region: a memfd of num_blocks * block_len bytes mapped MAP_SHARED here and
// passed to the daemon with SCM_RIGHTS. Block contents follow a pattern
// derived from a "source id", so any destination block can be checked
// against the source block it should hold.
//
// Thread-safety: one EngineClient or Region per thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "kvpeer/client.h"

namespace kvpeer::bench {

class EngineClient {
 public:
  // Connects to the control socket at `path`; throws BenchError.
  explicit EngineClient(const std::string& path);
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  // Sends one request line (without newline); `fd` >= 0 goes with it via
  // SCM_RIGHTS in the same sendmsg.
  void Send(std::string_view line, int fd = -1);
  // Reads the next answer line (without newline).
  std::string ReadLine();
  // Reads and parses the next answer.
  boost::json::object Read();
  // Reads the next answer and throws BenchError naming `what` unless ok.
  boost::json::object ReadOk(std::string_view what);
  // Send + ReadOk.
  boost::json::object Call(std::string_view line, std::string_view what, int fd = -1);

  // Closes the connection (the daemon ends the session).
  void Close() { client_.Close(); }
  bool open() const { return client_.open(); }

 private:
  std::string path_;
  kvpeer::Client client_;  // the engines' client (clients/cpp)
};

// Request lines.
namespace request {
std::string Hello(std::string_view client, uint64_t block_len, std::string_view fingerprint, std::string_view seed);
std::string RegisterFd(uint64_t num_blocks);
std::string Publish(const std::vector<std::string>& keys, const std::vector<uint32_t>& block_ids, bool seal = false);
// `wait_ms` > 0: one call resolves the probe (control-api.md, "`lookup` and `flush`").
std::string Lookup(std::string_view peer, std::string_view kv, const std::vector<std::string>& keys, bool flush,
                   int64_t wait_ms = 0);
// The wait_ms the bench's one-call lookups ask for: far above any answer's
// time, so a `retry` left after it means the peer did not answer.
constexpr int64_t kLookupWaitMs = 10000;
std::string Flush();
std::string Load(int64_t job_id, std::string_view peer, std::string_view kv, const std::vector<std::string>& keys,
                 const std::vector<uint32_t>& block_ids);
std::string Poll(int64_t wait_ms);
std::string Finish(std::string_view kv);
std::string Connect(std::string_view peer);
std::string Status();
}  // namespace request

// The `results` array of a lookup answer as counts.
struct LookupCounts {
  size_t hit = 0;
  size_t miss = 0;
  size_t retry = 0;
};
LookupCounts CountLookup(const boost::json::object& answer);

// 16 lowercase hex digits naming (space, index): distinct per pair.
std::string BlockKey(uint32_t space, uint32_t index);
// A key shaped like vLLM's: a 32-byte hash (here derived from space and
// index) and a 4-byte group id (0), as 72 lowercase hex digits.
std::string VllmStyleKey(uint32_t space, uint32_t index);

class Region {
 public:
  // A zero-filled memfd region, every page touched (faulted in) here.
  Region(uint64_t num_blocks, uint64_t block_len);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  int fd() const { return fd_; }
  uint64_t num_blocks() const { return num_blocks_; }
  uint64_t block_len() const { return block_len_; }
  std::span<uint8_t> Block(uint64_t index) const;

  // Writes the pattern of `source_id` into block `index`.
  void Fill(uint64_t index, uint64_t source_id);
  // Whether block `index` holds exactly the pattern of `source_id`.
  bool Verify(uint64_t index, uint64_t source_id) const;
  // Overwrites block `index` with a value that matches no pattern.
  void Scribble(uint64_t index);

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t num_blocks_;
  uint64_t block_len_;
};

}  // namespace kvpeer::bench
