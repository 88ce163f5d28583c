// kvpeer-bench's command line and the sizes of its two modes (full and
// --smoke), overridable per run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvpeer::bench {

inline constexpr uint64_t kMiB = 1024 * 1024;
inline constexpr uint64_t kKiB = 1024;

struct Options {
  bool smoke = false;
  std::string json_path;
  std::string bin_dir;
  std::string only;  // "", "baselines", "latency", "bulk", "shapes", "concurrency"
  std::vector<std::string> daemon_args;
  std::string daemon_wrapper;
  bool keep_dir = false;
  // Overrides of the mode's sizes; 0 keeps the mode's value.
  int repeat = 0;             // interleaved pairs of bulk rounds
  uint64_t round_mib = 0;     // each bulk round moves at least this
  double round_seconds = -1;  // and lasts at least this (< 0: the mode's)
  uint64_t request_keys = 0;  // keys of the request-shape rows
};

// Everything that differs between the full run and the smoke run.
struct Sizes {
  uint64_t bulk_total;    // at least this many bytes per measured bulk round
  double round_seconds;   // and at least this long
  uint64_t region_bytes;  // source and destination region per node
  uint64_t load_bytes;    // bytes per load
  int depth;              // loads in flight
  int rtt_count;          // baseline round trips
  int lookup_count;       // peer lookup samples (idle)
  int control_count;      // control-op samples
  uint64_t memcpy_total;
  std::vector<int> peer_counts;
  std::vector<int> concurrency;
  int probes;             // probe requests per (peers, N)
  int rounds;             // interleaved pairs of bulk rounds (raw TCP, daemons), medians reported
  int busy_lookups_min;   // lookup samples during bulk, at least
  uint64_t request_keys;  // keys of one request in the request-shape rows
};

Sizes FullSizes();
Sizes SmokeSizes();
// `sizes` with the command line's overrides (--repeat, --round-mib, ...).
Sizes WithOverrides(Sizes sizes, const Options& options);

std::string Usage();
// False on bad usage.
bool ParseArgs(int argc, char** argv, Options* options);

}  // namespace kvpeer::bench
