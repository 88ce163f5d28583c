// Real request shapes (issue 14 item 5): one request of a 128k-token prompt
// at 16 tokens per block, i.e. 8192 keys of 36 bytes (vLLM's 32-byte hash
// plus a 4-byte group id), looked up in one `lookup` and loaded in one
// `load`, between a producer and a consumer daemon of one block size.
//
// After one untimed pass, per repetition: one `lookup{wait_ms}` of all keys (asked again, 200 µs
// apart, only if keys were still `retry` when the wait ran out); then one
// `load` of all keys into slots 0..N-1 and `poll{wait_ms}` until its
// result. Timed: lookup (first send to the answer without `retry`) and load
// (send to its poll result); the CPU of both daemons (/proc) over each
// phase, per key. Sampled destination blocks (every block with verify_all)
// are checked after the load; `finish` is untimed.
//
// The request fits the control API's limits (control-api.md: at most 65,536
// keys per request, lines up to 16 MiB, --max-pending-lookups 65,536):
// 8192 keys of 72 hex digits make a line of about 0.6 MiB.
//
// Thread-safety: single-threaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/daemon_process.h"

namespace kvpeer::bench {

struct ShapeConfig {
  uint64_t keys = 8192;
  int repeats = 5;
  int64_t retry_pace_us = 200;
  bool verify_all = false;
};

// One repetition.
struct ShapeSample {
  double lookup_ms = 0;
  double load_ms = 0;
  int lookup_calls = 0;  // the lookup{wait_ms} and any repeat after its wait ran out
  double lookup_producer_cpu_us = 0, lookup_consumer_cpu_us = 0;
  double load_producer_cpu_us = 0, load_consumer_cpu_us = 0;
  uint64_t verified_blocks = 0;
};

// Starts a producer and a consumer daemon like `daemon` (block_len says the
// block size; sockets and logs go to `dir`), publishes `config.keys` blocks
// on the producer and measures `config.repeats` repetitions. Throws
// BenchError when a key misses, the load fails or a byte is wrong.
std::vector<ShapeSample> MeasureRequestShape(const DaemonOptions& daemon, const std::string& dir,
                                             const ShapeConfig& config);

}  // namespace kvpeer::bench
