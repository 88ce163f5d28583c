// The daemon measurements: engines attached to real kvpeerd processes.
//
// * SourceEngine: an engine on a producer node whose region holds patterned
//   blocks, all published under BlockKey(space, index) (or another naming).
// * RunBulk: the consumer engine fetches at least `total_bytes`, for at
//   least `min_seconds`, from a producer in loads of `blocks_per_load`
//   blocks, `depth` loads in flight, each load preceded by its lookup (the
//   symmetric flow an engine uses), verifying a sample of every load's
//   destination blocks (all of them with verify_all).
// * MeasureLookups / MeasureControlOps: round-trip samples in µs.
// * Concurrency: lookup+load latency of a probe request while N-1 other
//   requests have a load in flight, and of N requests started at once.
//
// Thread-safety: each function uses only the clients passed to it; RunBulk
// and MeasureLookups may run at once on different clients (different
// threads).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/engine_client.h"
#include "bench/round_length.h"

namespace kvpeer::bench {

// The pattern id of block `index` of key space `space`.
inline uint64_t SourceId(uint32_t space, uint32_t index) { return (uint64_t{space} << 32) | index; }

// How an engine names block `index` of key space `space`.
using KeyNaming = std::string (*)(uint32_t space, uint32_t index);

class SourceEngine {
 public:
  SourceEngine(const std::string& socket, uint64_t block_len, uint64_t num_blocks, uint32_t space,
               KeyNaming key_naming = &BlockKey);
  uint64_t num_blocks() const { return region_.num_blocks(); }
  // Publishes every block again at its slot (sealed or not) and returns the
  // wall time the daemon took, in ns: the cost of `seal` is the difference.
  int64_t RepublishNs(bool seal);
  uint32_t space() const { return space_; }
  EngineClient& client() { return client_; }

 private:
  void PublishAll(bool seal);

  EngineClient client_;
  Region region_;
  uint32_t space_;
  KeyNaming key_naming_;
};

// A consumer engine: a hello'd connection with a registered region.
struct ConsumerEngine {
  ConsumerEngine(const std::string& socket, uint64_t block_len, const std::string& name,
                 std::shared_ptr<Region> region);
  EngineClient client;
  std::shared_ptr<Region> region;
};

struct BulkConfig {
  // The round lasts until both are reached (bench/round_length.h).
  uint64_t total_bytes = 0;
  double min_seconds = 0;
  uint64_t blocks_per_load = 0;
  int depth = 4;
  bool verify_all = false;
};

struct BulkResult {
  uint64_t bytes = 0;
  double seconds = 0;
  uint64_t loads = 0;
  uint64_t verified_blocks = 0;
  double GBps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

// Throws BenchError when a lookup misses, a load fails or a byte is wrong.
BulkResult RunBulk(ConsumerEngine& engine, const std::string& peer, uint32_t space, uint64_t source_blocks,
                   const BulkConfig& config, const std::string& tag);

// How an engine learns a probe's answer.
enum class LookupFlow {
  kOneCall,  // lookup{wait_ms}: the answer comes when known
  kTwoCall,  // lookup{flush:true}, then lookup again while `retry`
};

// Peer lookup round trips of one published key until the answer is known
// (must be hit), by `flow`; then finish, untimed. `pace_us` of sleep
// between samples. Stops early when `keep_going` turns false; counts the
// samples taken so far in `taken`. µs per sample.
std::vector<double> MeasureLookups(EngineClient& client, const std::string& peer, const std::string& key, int count,
                                   int64_t pace_us, const std::string& tag, const std::atomic<bool>* keep_going,
                                   std::atomic<int>* taken = nullptr, LookupFlow flow = LookupFlow::kOneCall);

// Control-op round trips: poll{wait_ms:0} with nothing ready. µs per sample.
std::vector<double> MeasureControlOps(EngineClient& client, int count, int warmup);

// Answers of `lines` sent pipelined (a window of lines in flight); every
// answer must be ok.
std::vector<boost::json::object> Pipeline(EngineClient& client, const std::vector<std::string>& lines,
                                          const std::string& what);

}  // namespace kvpeer::bench
