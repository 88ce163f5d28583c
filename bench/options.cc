#include "bench/options.h"

#include <cmath>
#include <cstdlib>

namespace kvpeer::bench {
namespace {

// The control API's limit on the keys of one request (control-api.md).
constexpr double kMaxKeysPerRequest = 65536;

// --repeat, --round-mib, --round-seconds, --request-keys: positive integers
// (seconds: any number >= 0).
bool ParseSizeOverride(const std::string& flag, const std::string& text, Options* options) {
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(number) || number < 0) return false;
  if (flag == "--round-seconds") {
    options->round_seconds = number;
    return true;
  }
  if (number < 1 || number != std::floor(number) || number > 1e9) return false;
  if (flag == "--repeat") options->repeat = static_cast<int>(number);
  if (flag == "--round-mib") options->round_mib = static_cast<uint64_t>(number);
  if (flag == "--request-keys") {
    if (number > kMaxKeysPerRequest) return false;
    options->request_keys = static_cast<uint64_t>(number);
  }
  return true;
}

}  // namespace

Sizes FullSizes() {
  return Sizes{4096 * kMiB, 3.0,        256 * kMiB,          64 * kMiB, 4, 20000, 2000, 20000,
               4096 * kMiB, {1, 4, 16}, {1, 64, 1024, 4096}, 200,       5, 200,   8192};
}

Sizes SmokeSizes() {
  // Two pairs of 16 MiB rounds: the median and the interleaving are
  // exercised in about the time the single 32 MiB round took. One request of
  // 4096 keys (against 512 for the CI guard): at 1024 vs 128 an injected
  // O(n) string compare per key measured 1.29x, at 4096 vs 512 3.85x
  // (docs/performance.md, "The CI guard"); it adds ~2 s.
  return Sizes{16 * kMiB,  0.0,    16 * kMiB,     4 * kMiB, 2, 500, 50,  500,
               256 * kMiB, {1, 4}, {1, 64, 1024}, 10,       2, 10,  4096};
}

Sizes WithOverrides(Sizes sizes, const Options& options) {
  if (options.repeat > 0) sizes.rounds = options.repeat;
  if (options.round_mib > 0) sizes.bulk_total = options.round_mib * kMiB;
  if (options.round_seconds >= 0) sizes.round_seconds = options.round_seconds;
  if (options.request_keys > 0) sizes.request_keys = options.request_keys;
  return sizes;
}

std::string Usage() {
  return "usage: kvpeer-bench [--smoke] [--json FILE] [--bin-dir DIR]\n"
         "                    [--only baselines|latency|bulk|shapes|concurrency]\n"
         "                    [--daemon-arg ARG]... [--daemon-wrapper CMD] [--keep-dir]\n"
         "                    [--repeat N] [--round-mib N] [--round-seconds S] [--request-keys N]\n"
         "  --smoke        a few seconds, small sizes (CI); targets are reported, not required\n"
         "  --json FILE    also write the results as JSON\n"
         "  --bin-dir DIR  where kvpeerd is (DIR/daemon/kvpeerd or DIR/kvpeerd); default: next to this binary\n"
         "  --only PART    the baselines and one part (for profiling); latency = idle lookups and control ops\n"
         "  --daemon-arg A pass A to every kvpeerd (repeatable)\n"
         "  --daemon-wrapper CMD  run every kvpeerd under CMD (e.g. \"valgrind --tool=callgrind\")\n"
         "  --keep-dir     keep the scratch directory with the daemons' logs\n"
         "  --repeat N     N interleaved pairs of bulk rounds, raw TCP then daemons (default 5; smoke 2)\n"
         "  --round-mib N  each bulk round moves at least N MiB (default 4096; smoke 16)\n"
         "  --round-seconds S  and lasts at least S seconds (default 3; smoke 0)\n"
         "  --request-keys N   keys of the one request of the request-shape rows (default 8192; smoke 4096;\n"
         "                     at most 65536, the control API's limit)\n";
}

bool ParseArgs(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (arg == "--smoke") {
      options->smoke = true;
    } else if (arg == "--keep-dir") {
      options->keep_dir = true;
    } else if (arg == "--json") {
      if (!value(&options->json_path)) return false;
    } else if (arg == "--bin-dir") {
      if (!value(&options->bin_dir)) return false;
    } else if (arg == "--only") {
      if (!value(&options->only)) return false;
      if (options->only != "baselines" && options->only != "latency" && options->only != "bulk" &&
          options->only != "shapes" && options->only != "concurrency") {
        return false;
      }
    } else if (arg == "--repeat" || arg == "--round-mib" || arg == "--round-seconds" || arg == "--request-keys") {
      std::string text;
      if (!value(&text) || !ParseSizeOverride(arg, text, options)) return false;
    } else if (arg == "--daemon-wrapper") {
      if (!value(&options->daemon_wrapper)) return false;
    } else if (arg == "--daemon-arg") {
      std::string extra;
      if (!value(&extra)) return false;
      options->daemon_args.push_back(extra);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace kvpeer::bench
