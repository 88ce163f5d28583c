// kvpeer-bench: measures kvpeerd against this machine's own limits in one
// run (docs/performance.md).
//
//   kvpeer-bench [--smoke] [--json FILE] [--bin-dir DIR] [--only PART]
//                [--daemon-arg ARG]... [--keep-dir]
//
// Exit status: 0 when every measurement ran and its numbers are sane
// (transfers complete, sampled bytes verified, figures positive), whether or
// not the targets are met; 1 when a measurement failed; 2 on bad usage.
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <boost/json/serialize.hpp>

#include "bench/baselines.h"
#include "bench/concurrency.h"
#include "bench/daemon_process.h"
#include "bench/report.h"
#include "bench/request_shapes.h"
#include "bench/scenarios.h"
#include "bench/util.h"

namespace kvpeer::bench {
namespace {

namespace json = boost::json;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kKiB = 1024;
// Pause between paced samples: an engine's scheduler steps are this far
// apart or more, so the daemons go idle between requests.
constexpr int64_t kPaceUs = 200;

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

Sizes FullSizes() {
  return Sizes{4096 * kMiB, 3.0,        256 * kMiB,          64 * kMiB, 4, 20000, 2000, 20000,
               4096 * kMiB, {1, 4, 16}, {1, 64, 1024, 4096}, 200,       5, 200,   8192};
}

Sizes SmokeSizes() {
  // Two pairs of 16 MiB rounds: the median and the interleaving are
  // exercised in about the time the single 32 MiB round took.
  return Sizes{16 * kMiB,  0.0,    16 * kMiB,     4 * kMiB, 2, 500, 50,  500,
               256 * kMiB, {1, 4}, {1, 64, 1024}, 10,       2, 10,  1024};
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
         "  --request-keys N   keys of the one request of the request-shape rows (default 8192; smoke 1024;\n"
         "                     at most 65536, the control API's limit)\n";
}

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

std::string FindDaemon(const Options& options, const char* argv0) {
  std::vector<std::filesystem::path> dirs;
  if (!options.bin_dir.empty()) {
    dirs.push_back(options.bin_dir);
  } else {
    std::error_code ec;
    auto self = std::filesystem::canonical("/proc/self/exe", ec);
    if (ec) self = std::filesystem::absolute(argv0);
    dirs.push_back(self.parent_path().parent_path());
    dirs.push_back(self.parent_path());
  }
  for (const auto& dir : dirs) {
    for (const auto& candidate : {dir / "daemon" / "kvpeerd", dir / "kvpeerd"}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  throw BenchError("kvpeerd not found under " + dirs.front().string() + " (give --bin-dir: the build directory)");
}

std::string MachineText() {
  utsname name{};
  ::uname(&name);
  std::string model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return std::to_string(std::thread::hardware_concurrency()) + " CPUs (" + model + "), Linux " + name.release;
}

json::object Summary(const std::vector<double>& samples) {
  double sum = 0;
  for (double s : samples) sum += s;
  return json::object{
      {"count", samples.size()},         {"p50", Percentile(samples, 0.5)},
      {"p90", Percentile(samples, 0.9)}, {"p99", Percentile(samples, 0.99)},
      {"max", Percentile(samples, 1.0)}, {"mean", samples.empty() ? 0.0 : sum / static_cast<double>(samples.size())}};
}

std::string SizeName(uint64_t bytes) {
  return bytes >= kMiB ? std::to_string(bytes / kMiB) + "MiB" : std::to_string(bytes / kKiB) + "KiB";
}

// The 1-minute load average: other work on the machine skews every figure.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return load;
}

// ---------------------------------------------------------------------------

struct Baselines {
  std::vector<double> tcp_rtt, unix_rtt;
  std::vector<double> tcp_rtt_paced;  // with kPaceUs between round trips
  std::vector<double> unix_rtt_paced;
  double unix_echo_cpu_us = 0;  // the Unix echo thread's CPU per round trip
  double memcpy_gbps = 0;
};

Baselines RunBaselines(const Sizes& sizes, Report& report) {
  Baselines b;
  Progress("baseline: 64-byte round trips, memcpy");
  b.tcp_rtt = TcpRoundTrips(sizes.rtt_count, sizes.rtt_count / 10);
  b.unix_rtt = UnixRoundTrips(sizes.rtt_count, sizes.rtt_count / 10, &b.unix_echo_cpu_us);
  b.tcp_rtt_paced = TcpRoundTrips(sizes.lookup_count, sizes.lookup_count / 10, kPaceUs);
  b.unix_rtt_paced = UnixRoundTrips(sizes.lookup_count, sizes.lookup_count / 10, nullptr, kPaceUs);
  b.memcpy_gbps = MemcpyGBps(kMiB, sizes.memcpy_total, sizes.region_bytes);

  report.Add(Fig("tcp_rtt_p50_us", "baseline: TCP 64 B round trip p50", "us", Percentile(b.tcp_rtt, 0.5)));
  report.Add(Fig("tcp_rtt_p99_us", "baseline: TCP 64 B round trip p99", "us", Percentile(b.tcp_rtt, 0.99)));
  report.Add(Fig("tcp_rtt_paced_p50_us", "baseline: TCP 64 B round trip p50, 200 us apart", "us",
                 Percentile(b.tcp_rtt_paced, 0.5)));
  report.Add(Fig("unix_rtt_p50_us", "baseline: Unix 64 B round trip p50", "us", Percentile(b.unix_rtt, 0.5)));
  report.Add(Fig("unix_rtt_p99_us", "baseline: Unix 64 B round trip p99", "us", Percentile(b.unix_rtt, 0.99)));
  report.Add(Fig("unix_rtt_paced_p50_us", "baseline: Unix 64 B round trip p50, 200 us apart", "us",
                 Percentile(b.unix_rtt_paced, 0.5)));
  report.Add(Fig("unix_echo_cpu_us", "baseline: Unix echo thread CPU per round trip", "us", b.unix_echo_cpu_us));
  report.Add(Fig("memcpy_GBps", "baseline: memcpy 1 MiB, 1 thread", "GB/s", b.memcpy_gbps));
  report.details()["tcp_rtt_us"] = Summary(b.tcp_rtt);
  report.details()["unix_rtt_us"] = Summary(b.unix_rtt);
  report.details()["tcp_rtt_paced_us"] = Summary(b.tcp_rtt_paced);
  report.details()["unix_rtt_paced_us"] = Summary(b.unix_rtt_paced);
  return b;
}

// One producer (A) and one consumer (B) daemon with `block` blocks.
struct Pair {
  // `tag` tells apart the files of pairs that run at once.
  Pair(const DaemonOptions& daemon, const std::string& dir, const Sizes& sizes, const std::string& tag = "")
      : a(Named(daemon, dir, "a" + tag)), b(Named(daemon, dir, "b" + tag)) {
    const uint64_t block = daemon.block_len;
    a.Start();
    b.Start();
    const uint64_t blocks = sizes.region_bytes / block;
    source = std::make_unique<SourceEngine>(a.socket_path(), block, blocks, 1);
    bulk =
        std::make_unique<ConsumerEngine>(b.socket_path(), block, "bench-bulk", std::make_shared<Region>(blocks, block));
    side = std::make_unique<ConsumerEngine>(b.socket_path(), block, "bench-lookups", nullptr);
    side->client.Call(request::Connect(a.listen()), "connect");
  }
  ~Pair() {
    side.reset();
    bulk.reset();
    source.reset();
    StopTogether(a, b);
  }
  static DaemonOptions Named(const DaemonOptions& daemon, const std::string& dir, const std::string& name) {
    return WithFiles(daemon, dir + "/" + name + SizeName(daemon.block_len));
  }
  DaemonProcess a, b;
  std::unique_ptr<SourceEngine> source;
  std::unique_ptr<ConsumerEngine> bulk, side;
};

struct BulkFigures {
  BulkResult result;
  double daemons_cpu_s_per_gb = 0;
  double producer_cpu_s_per_gb = 0;
  double consumer_cpu_s_per_gb = 0;
  double engine_cpu_s_per_gb = 0;
  double daemon_switches_per_mb = 0;  // both daemons' voluntary context switches per MB moved
};

BulkFigures MeasuredBulk(Pair& pair, const BulkConfig& config, const std::string& tag) {
  const int64_t a0 = pair.a.CpuNs(), b0 = pair.b.CpuNs(), e0 = ProcessCpuNs();
  const int64_t s0 = pair.a.VoluntarySwitches() + pair.b.VoluntarySwitches();
  BulkFigures f;
  f.result = RunBulk(*pair.bulk, pair.a.listen(), 1, pair.source->num_blocks(), config, tag);
  const double gb = static_cast<double>(f.result.bytes) / 1e9;
  const double a = static_cast<double>(pair.a.CpuNs() - a0) / 1e9, b = static_cast<double>(pair.b.CpuNs() - b0) / 1e9;
  f.producer_cpu_s_per_gb = a / gb;
  f.consumer_cpu_s_per_gb = b / gb;
  f.daemons_cpu_s_per_gb = (a + b) / gb;
  f.engine_cpu_s_per_gb = static_cast<double>(ProcessCpuNs() - e0) / 1e9 / gb;
  f.daemon_switches_per_mb =
      static_cast<double>(pair.a.VoluntarySwitches() + pair.b.VoluntarySwitches() - s0) / (gb * 1000);
  return f;
}

json::object BulkJson(const BulkFigures& f) {
  return json::object{{"bytes", f.result.bytes},
                      {"seconds", f.result.seconds},
                      {"GBps", f.result.GBps()},
                      {"loads", f.result.loads},
                      {"verified_blocks", f.result.verified_blocks},
                      {"producer_cpu_s_per_GB", f.producer_cpu_s_per_gb},
                      {"consumer_cpu_s_per_GB", f.consumer_cpu_s_per_gb},
                      {"engine_cpu_s_per_GB", f.engine_cpu_s_per_gb},
                      {"daemon_context_switches_per_MB", f.daemon_switches_per_mb}};
}

// What the xxh3 feature costs in bulk (issue goals: with checksums on, at
// least 0.9x the throughput and at most 1.15x the daemons' CPU per GB of the
// same transfer with them off, as medians of interleaved rounds).
void ReportChecksumCost(const std::string& name, const std::vector<double>& on_gbps, const std::vector<double>& on_cpu,
                        const std::vector<double>& off_gbps, const std::vector<double>& off_cpu, Report& report) {
  Figure off = MedianFigure("bulk_" + name + "_nochecksum_GBps", "bulk fetch " + name + " blocks, checksums off",
                            "GB/s", off_gbps);
  report.Add(off);
  report.Add(MedianFigure("bulk_" + name + "_nochecksum_cpu_s_per_GB",
                          "CPU of both daemons per GB, " + name + ", checksums off", "s/GB", off_cpu));
  Figure speed =
      MedianFigure("bulk_" + name + "_checksum_GBps", "bulk fetch " + name + " blocks, checksums on", "GB/s", on_gbps);
  speed.baseline = off.value;
  speed.baseline_name = "checksums off";
  speed.Aim(Goal::kRatioMin, 0.9, ">= 0.9x");
  report.Add(speed);
  Figure cpu = MedianFigure("bulk_" + name + "_checksum_cpu_s_per_GB",
                            "CPU of both daemons per GB, " + name + ", checksums on", "s/GB", on_cpu);
  cpu.baseline = SpreadOf(off_cpu).median;
  cpu.baseline_name = "checksums off";
  cpu.Aim(Goal::kRatioMax, 1.15, "<= 1.15x");
  report.Add(cpu);
}

// The cost of `publish` with `seal` (control-api.md section 2): the whole
// source region published again, sealed and not, interleaved; the median
// difference per MiB is what sealing adds. Sealed last: the bulk rounds
// that follow must find the region as every source is published (sealed,
// bench/scenarios.cc), or the block sizes would not be compared alike.
void MeasureSealCost(SourceEngine& source, uint64_t block, const Sizes& sizes, Report& report) {
  Progress("daemons: publish, sealed and not");
  std::vector<double> sealed_us, plain_us;
  for (int round = 0; round < std::max(3, sizes.rounds * 2); ++round) {
    plain_us.push_back(static_cast<double>(source.RepublishNs(false)) / 1e3);
    sealed_us.push_back(static_cast<double>(source.RepublishNs(true)) / 1e3);
  }
  const double mib = static_cast<double>(source.num_blocks() * block) / static_cast<double>(kMiB);
  const double plain = Percentile(plain_us, 0.5), sealed = Percentile(sealed_us, 0.5);
  report.Add(Fig("publish_seal_us_per_MiB", "publish with seal: added time per MiB sealed", "us/MiB",
                 std::max(0.0, sealed - plain) / mib));
  report.Add(Fig("publish_us_per_MiB", "publish without seal, per MiB of blocks named", "us/MiB", plain / mib));
  report.details()["publish_seal"] =
      json::object{{"MiB", mib}, {"plain_us", Summary(plain_us)}, {"sealed_us", Summary(sealed_us)}};
}

// The samples of the interleaved bulk rounds at one block size: entry i of
// every vector comes from pair i.
struct RoundSamples {
  std::vector<double> raw_gbps, raw_cpu, daemon_gbps, daemon_cpu, engine_cpu, plain_gbps, plain_cpu;
  std::vector<double> unsealed_gbps, unsealed_cpu;  // the same daemons, the source published without seal
};

std::string SecondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", seconds);
  return text;
}

double MonotonicSeconds() { return static_cast<double>(NowNs()) / 1e9; }

json::object RawJson(const RawTransfer& raw, double started_s) {
  return json::object{{"raw_started_s", started_s},
                      {"raw_bytes", raw.bytes},
                      {"raw_seconds", raw.seconds},
                      {"raw_GBps", raw.GBps()},
                      {"raw_cpu_s_per_GB", raw.CpuSecondsPerGB()},
                      {"raw_sender_cpu_s", raw.sender_cpu_ns / 1e9},
                      {"raw_receiver_cpu_s", raw.receiver_cpu_ns / 1e9},
                      {"raw_context_switches_per_MB", static_cast<double>(raw.context_switches) / (raw.bytes / 1e6)}};
}

// Pairs of rounds, raw TCP then the daemons (then the checksums-off daemons
// when `plain` is given): A B A B ..., so that both members of a pair see
// the machine in the same state and slow drift lands in both. Each round's
// start (CLOCK_MONOTONIC, as the progress lines) is in its JSON item.
// A round with the source published without seal, so the producer hashes
// each block as it serves it (wire-protocol.md section 7); sealed again
// after, as every other round finds it. The publishes are outside the round.
BulkFigures MeasuredUnsealedBulk(Pair& pair, const BulkConfig& config, const std::string& tag) {
  pair.source->RepublishNs(false);
  const BulkFigures figures = MeasuredBulk(pair, config, "bulk-unsealed-" + tag);
  pair.source->RepublishNs(true);
  return figures;
}

RoundSamples RunInterleavedRounds(Pair& pair, Pair* plain, uint64_t block, const BulkConfig& config, const Sizes& sizes,
                                  Report& report, std::vector<std::string>* problems) {
  const std::string name = SizeName(block);
  const RoundLength length{config.total_bytes, config.min_seconds};
  RoundSamples samples;
  json::array rounds;
  for (int round = 0; round < sizes.rounds; ++round) {
    Progress("pair " + std::to_string(round + 1) + " of " + std::to_string(sizes.rounds) +
             ": raw TCP, then the daemons" + (plain ? ", then the daemons without checksums" : "") + ", >= " +
             SizeName(config.total_bytes) + " and >= " + SecondsText(config.min_seconds) + " each, at " + name);
    const double raw_started = MonotonicSeconds();
    const RawTransfer raw = RawTcpThroughput(block, length, sizes.region_bytes);
    const double daemons_started = MonotonicSeconds();
    const BulkFigures f = MeasuredBulk(pair, config, "bulk-" + name + "-" + std::to_string(round));
    samples.raw_gbps.push_back(raw.GBps());
    samples.raw_cpu.push_back(raw.CpuSecondsPerGB());
    samples.daemon_gbps.push_back(f.result.GBps());
    samples.daemon_cpu.push_back(f.daemons_cpu_s_per_gb);
    samples.engine_cpu.push_back(f.engine_cpu_s_per_gb);
    json::object item = BulkJson(f);
    for (const auto& field : RawJson(raw, raw_started)) item[field.key()] = field.value();
    item["daemons_started_s"] = daemons_started;
    if (plain) {
      const double plain_started = MonotonicSeconds();
      const BulkFigures off = MeasuredBulk(*plain, config, "bulk-nosum-" + name + "-" + std::to_string(round));
      samples.plain_gbps.push_back(off.result.GBps());
      samples.plain_cpu.push_back(off.daemons_cpu_s_per_gb);
      json::object off_item = BulkJson(off);
      off_item["started_s"] = plain_started;
      item["checksums_off"] = std::move(off_item);
      const BulkFigures unsealed = MeasuredUnsealedBulk(pair, config, name + "-" + std::to_string(round));
      samples.unsealed_gbps.push_back(unsealed.result.GBps());
      samples.unsealed_cpu.push_back(unsealed.daemons_cpu_s_per_gb);
      item["unsealed"] = BulkJson(unsealed);
    }
    rounds.push_back(std::move(item));
    if (f.result.verified_blocks == 0 || !(f.result.GBps() > 0) || raw.bytes == 0) {
      problems->push_back("bulk " + name + ": nothing verified");
    }
  }
  Progress("bulk rounds at " + name + " done");
  report.details()["bulk_" + name + "_rounds"] = std::move(rounds);
  report.details()["bulk_rounds_settings"] =
      json::object{{"pairs", sizes.rounds},
                   {"min_bytes", config.total_bytes},
                   {"min_seconds", config.min_seconds},
                   {"order",
                    "raw TCP, daemons, daemons with checksums off, daemons with the source unsealed "
                    "(the last two at 1 MiB only), per pair"},
                   {"spread", "min, max and interquartile range (q1, q3 interpolated between closest ranks)"}};
  return samples;
}

// The median of the pairs' ratios, with its spread: steadier than the
// ratio of the two medians, since both rounds of a pair shared the machine.
Figure PairRatioFigure(std::string id, std::string name, const std::vector<double>& numerator,
                       const std::vector<double>& denominator, Goal goal, double target, std::string target_text) {
  Figure f = MedianFigure(std::move(id), std::move(name), "x", PairRatios(numerator, denominator));
  f.Aim(goal, target, std::move(target_text));
  return f;
}

void ReportRounds(const std::string& name, bool first, const RoundSamples& s, const Sizes& sizes, Report& report) {
  report.Add(MedianFigure("raw_tcp_" + name + "_GBps", "baseline: raw TCP, 1 conn, " + name + " send/recv", "GB/s",
                          s.raw_gbps));
  report.Add(
      MedianFigure("raw_tcp_" + name + "_cpu_s_per_GB", "baseline: raw TCP pair CPU, " + name, "s/GB", s.raw_cpu));
  Figure gbps = MedianFigure("bulk_" + name + "_GBps",
                             "bulk fetch >= " + SizeName(sizes.bulk_total) + " per round, " + name + " blocks", "GB/s",
                             s.daemon_gbps);
  gbps.baseline = SpreadOf(s.raw_gbps).median;
  gbps.baseline_name = "raw TCP";
  gbps.Aim(Goal::kRatioMin, first ? 0.9 : 0.6, first ? ">= 0.9x" : ">= 0.6x");
  report.Add(gbps);
  Figure cpu =
      MedianFigure("bulk_" + name + "_cpu_s_per_GB", "CPU of both daemons per GB, " + name, "s/GB", s.daemon_cpu);
  cpu.baseline = SpreadOf(s.raw_cpu).median;
  cpu.baseline_name = "raw pair";
  cpu.Aim(Goal::kRatioMax, 1.25, "<= 1.25x");
  report.Add(cpu);
  report.Add(
      MedianFigure("bulk_" + name + "_engine_cpu_s_per_GB", "bench engine CPU per GB, " + name, "s/GB", s.engine_cpu));
  report.Add(PairRatioFigure("bulk_" + name + "_pair_ratio", "bulk " + name + " / raw TCP, median of pairs",
                             s.daemon_gbps, s.raw_gbps, Goal::kValueMin, 0.9, ">= 0.9x"));
  report.Add(PairRatioFigure("bulk_" + name + "_cpu_pair_ratio",
                             "daemons' CPU per GB / raw pair's, " + name + ", median of pairs", s.daemon_cpu, s.raw_cpu,
                             Goal::kValueMax, 1.15, "<= 1.15x"));
  if (s.plain_gbps.empty()) return;
  ReportChecksumCost(name, s.daemon_gbps, s.daemon_cpu, s.plain_gbps, s.plain_cpu, report);
  report.Add(PairRatioFigure("bulk_" + name + "_checksum_pair_ratio",
                             "bulk " + name + " checksums on / off, median of pairs", s.daemon_gbps, s.plain_gbps,
                             Goal::kValueMin, 0.9, ">= 0.9x"));
  report.Add(PairRatioFigure("bulk_" + name + "_checksum_cpu_pair_ratio",
                             "daemons' CPU per GB checksums on / off, " + name + ", median of pairs", s.daemon_cpu,
                             s.plain_cpu, Goal::kValueMax, 1.15, "<= 1.15x"));
  if (s.unsealed_gbps.empty()) return;
  report.Add(MedianFigure("bulk_" + name + "_unsealed_GBps", "bulk fetch " + name + " blocks, source unsealed", "GB/s",
                          s.unsealed_gbps));
  report.Add(MedianFigure("bulk_" + name + "_unsealed_cpu_s_per_GB",
                          "CPU of both daemons per GB, " + name + ", source unsealed", "s/GB", s.unsealed_cpu));
  report.Add(PairRatioFigure("bulk_" + name + "_unsealed_pair_ratio",
                             "bulk " + name + " source unsealed / raw TCP, median of pairs", s.unsealed_gbps,
                             s.raw_gbps, Goal::kNone, 0, "-"));
  report.Add(PairRatioFigure("bulk_" + name + "_unsealed_cpu_pair_ratio",
                             "daemons' CPU per GB / raw pair's, " + name + ", source unsealed, median of pairs",
                             s.unsealed_cpu, s.raw_cpu, Goal::kNone, 0, "-"));
}

void RunBulkPart(const std::string& binary, const std::string& dir, const Options& options, const Sizes& sizes,
                 const Baselines& base, Report& report, std::vector<std::string>* problems) {
  for (uint64_t block : {kMiB, 64 * kKiB}) {
    const std::string name = SizeName(block);
    Progress("daemons: bulk fetch, " + name + " blocks");
    DaemonOptions daemon;
    daemon.binary = binary;
    daemon.block_len = block;
    daemon.extra_args = options.daemon_args;
    daemon.wrapper = options.daemon_wrapper;
    Pair pair(daemon, dir, sizes);
    BulkConfig config;
    config.blocks_per_load = sizes.load_bytes / block;
    config.depth = sizes.depth;
    config.verify_all = options.smoke;

    const bool first = block == kMiB;
    if (first) {
      Progress("daemons: peer lookups and control ops, idle");
      // Back to back like the TCP baseline; and paced, like an engine whose
      // steps are apart, against a TCP baseline paced the same way.
      const int64_t a0 = pair.a.CpuNs(), b0 = pair.b.CpuNs();
      auto idle = MeasureLookups(pair.side->client, pair.a.listen(), BlockKey(1, 0), sizes.lookup_count, 0,
                                 "idle-lookup", nullptr);
      const double lookup_cpu_a_us = static_cast<double>(pair.a.CpuNs() - a0) / 1e3 / sizes.lookup_count;
      const double lookup_cpu_b_us = static_cast<double>(pair.b.CpuNs() - b0) / 1e3 / sizes.lookup_count;
      auto paced = MeasureLookups(pair.side->client, pair.a.listen(), BlockKey(1, 0), sizes.lookup_count, kPaceUs,
                                  "paced-lookup", nullptr);
      // The flow before wait_ms, reported beside it (issue 14 item 4).
      auto idle_two = MeasureLookups(pair.side->client, pair.a.listen(), BlockKey(1, 0), sizes.lookup_count, 0,
                                     "idle-lookup-2", nullptr, nullptr, LookupFlow::kTwoCall);
      auto paced_two = MeasureLookups(pair.side->client, pair.a.listen(), BlockKey(1, 0), sizes.lookup_count, kPaceUs,
                                      "paced-lookup-2", nullptr, nullptr, LookupFlow::kTwoCall);
      const int64_t b_before = pair.b.CpuNs();
      auto control = MeasureControlOps(pair.side->client, sizes.control_count, sizes.control_count / 10);
      const double control_cpu_us =
          static_cast<double>(pair.b.CpuNs() - b_before) / 1e3 / (sizes.control_count + sizes.control_count / 10);
      const double rtt = Percentile(base.tcp_rtt, 0.5);
      Figure lookup =
          Fig("lookup_idle_p50_us", "peer lookup p50 (one call, wait_ms), idle", "us", Percentile(idle, 0.5));
      lookup.baseline = rtt;
      lookup.baseline_name = "TCP RTT p50";
      char text[64];
      std::snprintf(text, sizeof(text), "<= 2xRTT+50 = %.0f us", 2 * rtt + 50);
      lookup.Aim(Goal::kValueMax, 2 * rtt + 50, text);
      report.Add(lookup);
      Figure lookup99 = Fig("lookup_idle_p99_us", "peer lookup p99, idle", "us", Percentile(idle, 0.99));
      lookup99.baseline = Percentile(base.tcp_rtt, 0.99);
      lookup99.baseline_name = "TCP RTT p99";
      report.Add(lookup99);
      Figure op = Fig("control_op_p50_us", "control op (poll, nothing ready) p50", "us", Percentile(control, 0.5));
      op.baseline = Percentile(base.unix_rtt, 0.5);
      op.baseline_name = "Unix RTT p50";
      op.Aim(Goal::kRatioMax, 1.5, "<= 1.5x");
      report.Add(op);
      Figure op99 = Fig("control_op_p99_us", "control op (poll, nothing ready) p99", "us", Percentile(control, 0.99));
      op99.baseline = Percentile(base.unix_rtt, 0.99);
      op99.baseline_name = "Unix RTT p99";
      report.Add(op99);
      Figure paced50 = Fig("lookup_idle_paced_p50_us", "peer lookup p50 (one call, wait_ms), idle, 200 us apart", "us",
                           Percentile(paced, 0.5));
      // The one-call lookup wakes four processes (engine, two daemons,
      // engine) where the TCP baseline wakes two: its floor is a paced TCP
      // round trip plus the engine's two Unix hops (issue 27 item 4).
      paced50.baseline = Percentile(base.tcp_rtt_paced, 0.5) + 2 * Percentile(base.unix_rtt_paced, 0.5);
      paced50.baseline_name = "paced TCP RTT p50 + 2 x paced Unix RTT p50";
      paced50.Aim(Goal::kRatioMax, 1.5, "<= 1.5x");
      report.Add(paced50);
      Figure two50 = Fig("lookup_idle_two_call_p50_us", "peer lookup p50 (flush, then again while retry), idle", "us",
                         Percentile(idle_two, 0.5));
      two50.baseline = rtt;
      two50.baseline_name = "TCP RTT p50";
      report.Add(two50);
      Figure paced_two50 =
          Fig("lookup_idle_paced_two_call_p50_us",
              "peer lookup p50 (flush, then again while retry), idle, 200 us apart", "us", Percentile(paced_two, 0.5));
      paced_two50.baseline = Percentile(base.tcp_rtt_paced, 0.5);
      paced_two50.baseline_name = "TCP RTT p50, 200 us apart";
      report.Add(paced_two50);
      report.details()["lookup_idle_us"] = Summary(idle);
      report.details()["lookup_idle_paced_us"] = Summary(paced);
      report.details()["lookup_idle_two_call_us"] = Summary(idle_two);
      report.details()["lookup_idle_paced_two_call_us"] = Summary(paced_two);
      report.details()["control_op_us"] = Summary(control);
      Figure op_cpu = Fig("control_op_daemon_cpu_us", "consumer daemon CPU per control op", "us", control_cpu_us);
      op_cpu.baseline = base.unix_echo_cpu_us;
      op_cpu.baseline_name = "Unix echo thread CPU";
      op_cpu.Aim(Goal::kRatioMax, 1.2, "<= 1.2x");
      report.Add(op_cpu);
      // Includes the finish after each lookup and the engine's repeated
      // lookups until the answer is known.
      report.details()["lookup_cpu_us"] = json::object{
          {"producer_per_lookup", lookup_cpu_a_us}, {"consumer_per_lookup_incl_finish_and_retries", lookup_cpu_b_us}};
      if (idle.empty() || control.empty()) problems->push_back("no lookup or control-op samples");
      if (options.only == "latency") return;
    }

    if (first) MeasureSealCost(*pair.source, block, sizes, report);

    // At 1 MiB a second pair runs with checksums off (wire-protocol.md
    // section 7), its rounds interleaved with the first's, so the cost of
    // the xxh3 feature is always in the report (docs/performance.md).
    std::unique_ptr<Pair> plain;
    if (first) {
      DaemonOptions off = daemon;
      off.extra_args.insert(off.extra_args.end(), {"--features", ""});
      plain = std::make_unique<Pair>(off, dir, sizes, "-nosum");
    }

    // The first pass over the regions is the cold row: the engines' pages
    // are faulted in (the bench's engines touch their regions), the
    // daemons' mappings are not (docs/performance.md, "Cold pages and huge
    // pages"). Every later row is warm.
    BulkConfig warm = config;
    warm.total_bytes = sizes.region_bytes;
    const BulkFigures cold = MeasuredBulk(pair, warm, "cold-" + name);
    report.Add(Fig("bulk_" + name + "_cold_GBps",
                   "bulk fetch " + name + ", first pass: the daemons' mappings of the regions cold", "GB/s",
                   cold.result.GBps()));
    report.details()["bulk_" + name + "_cold"] = BulkJson(cold);
    if (plain) RunBulk(*plain->bulk, plain->a.listen(), 1, plain->source->num_blocks(), warm, "warm-nosum-" + name);

    config.total_bytes = sizes.bulk_total;
    config.min_seconds = sizes.round_seconds;
    const RoundSamples samples = RunInterleavedRounds(pair, plain.get(), block, config, sizes, report, problems);
    ReportRounds(name, first, samples, sizes, report);
    plain.reset();
    const double raw_median = SpreadOf(samples.raw_gbps).median;

    if (first) {
      Progress("daemons: peer lookups during a bulk fetch");
      // The bulk fetch repeats (the figures of its first pass are
      // reported) until enough lookups ran during it.
      std::atomic<bool> running{true};
      std::atomic<int> taken{0};
      BulkFigures loaded;
      std::string thread_error;
      std::thread bulk_thread([&] {
        try {
          for (int pass = 0; pass == 0 || (taken < sizes.busy_lookups_min && pass < 100); ++pass) {
            BulkFigures figures = MeasuredBulk(pair, config, "loaded-" + name + "-" + std::to_string(pass));
            if (pass == 0) loaded = figures;
          }
        } catch (const std::exception& e) {
          thread_error = e.what();
        }
        running = false;
      });
      std::vector<double> busy;
      std::string lookup_error;
      try {
        busy = MeasureLookups(pair.side->client, pair.a.listen(), BlockKey(1, 1), 1 << 30, 1000, "busy-lookup",
                              &running, &taken);
      } catch (const std::exception& e) {
        lookup_error = e.what();
      }
      bulk_thread.join();
      if (!thread_error.empty()) throw BenchError(thread_error);
      if (!lookup_error.empty()) throw BenchError(lookup_error);
      report.Add(Fig("lookup_busy_p50_us", "peer lookup p50, during bulk on the same connection", "us",
                     Percentile(busy, 0.5)));
      Figure busy99 = Fig("lookup_busy_p99_us", "peer lookup p99, during bulk on the same connection", "us",
                          Percentile(busy, 0.99));
      busy99.Aim(Goal::kValueMax, 5000, "<= 5000 us");
      report.Add(busy99);
      Figure during = Fig("bulk_" + name + "_with_lookups_GBps", "bulk fetch " + name + " while lookups run", "GB/s",
                          loaded.result.GBps());
      during.baseline = raw_median;
      during.baseline_name = "raw TCP";
      report.Add(during);
      report.details()["lookup_busy_us"] = Summary(busy);
      report.details()["bulk_" + name + "_with_lookups"] = BulkJson(loaded);
      if (busy.empty()) problems->push_back("no lookup samples during the bulk fetch");
    }
  }
}

json::object ShapeSampleJson(const ShapeSample& s) {
  return json::object{{"lookup_ms", s.lookup_ms},
                      {"lookup_calls", s.lookup_calls},
                      {"load_ms", s.load_ms},
                      {"lookup_producer_cpu_us", s.lookup_producer_cpu_us},
                      {"lookup_consumer_cpu_us", s.lookup_consumer_cpu_us},
                      {"load_producer_cpu_us", s.load_producer_cpu_us},
                      {"load_consumer_cpu_us", s.load_consumer_cpu_us},
                      {"verified_blocks", s.verified_blocks}};
}

void ReportShape(const std::string& name, const std::string& shape, const ShapeConfig& config, uint64_t block,
                 const std::vector<ShapeSample>& samples, Report& report, std::vector<std::string>* problems) {
  const auto keys = static_cast<double>(config.keys);
  std::vector<double> lookup_ms, lookup_calls, load_ms, lookup_cpu, load_cpu, load_gbps;
  json::array items;
  for (const ShapeSample& s : samples) {
    lookup_ms.push_back(s.lookup_ms);
    lookup_calls.push_back(s.lookup_calls);
    load_ms.push_back(s.load_ms);
    lookup_cpu.push_back((s.lookup_producer_cpu_us + s.lookup_consumer_cpu_us) / keys);
    load_cpu.push_back((s.load_producer_cpu_us + s.load_consumer_cpu_us) / keys);
    load_gbps.push_back(keys * static_cast<double>(block) / (s.load_ms / 1e3) / 1e9);
    items.push_back(ShapeSampleJson(s));
    if (s.verified_blocks == 0) problems->push_back("request shape " + name + ": nothing verified");
  }
  const std::string id = "request_" + name + "_";
  report.Add(MedianFigure(id + "lookup_ms", "lookup of one request (" + shape + "), " + name + ", until no retry", "ms",
                          lookup_ms));
  // One lookup{wait_ms} resolves the probe (issue 14 item 4); more than one
  // call means its wait ran out. The lookup CPU per key includes repeats.
  report.Add(MedianFigure(id + "lookup_calls", "lookup{wait_ms} calls until no retry, " + name, "calls", lookup_calls));
  report.Add(
      MedianFigure(id + "load_ms", "load of its blocks in one call, " + name + ", to the poll result", "ms", load_ms));
  report.Add(MedianFigure(id + "load_GBps", "load of one request, " + name + " blocks", "GB/s", load_gbps));
  report.Add(MedianFigure(id + "lookup_daemon_cpu_us_per_key", "both daemons' CPU per key, lookup, " + name, "us",
                          lookup_cpu));
  report.Add(
      MedianFigure(id + "load_daemon_cpu_us_per_key", "both daemons' CPU per key, load, " + name, "us", load_cpu));
  report.details()["request_" + name] = json::object{{"keys", config.keys},
                                                     {"key_bytes", 36},
                                                     {"block_len", block},
                                                     {"lookup_retry_pace_us", config.retry_pace_us},
                                                     {"repetitions", std::move(items)}};
}

double MedianPerKey(const std::vector<ShapeSample>& samples, uint64_t keys, bool lookup) {
  std::vector<double> per_key;
  for (const ShapeSample& s : samples) {
    const double us =
        lookup ? s.lookup_producer_cpu_us + s.lookup_consumer_cpu_us : s.load_producer_cpu_us + s.load_consumer_cpu_us;
    per_key.push_back(us / static_cast<double>(keys));
  }
  return Percentile(per_key, 0.5);
}

// CI guards: both daemons' CPU per key of one request of N keys against one
// of N/8 keys. Per-key work that grows with the request (an O(n) step per
// key) shows as a ratio of about 8 on any machine; the fixed cost of a
// request makes the small one dearer per key, not the large one.
void AddKeyScalingGuards(const DaemonOptions& daemon, const std::string& dir, const ShapeConfig& config,
                         const std::vector<ShapeSample>& large, Report& report, std::vector<std::string>* problems) {
  ShapeConfig small = config;
  small.keys = std::max<uint64_t>(config.keys / 8, 1);
  const std::vector<ShapeSample> samples = MeasureRequestShape(daemon, dir, small);
  for (const ShapeSample& s : samples) {
    if (s.verified_blocks == 0)
      problems->push_back("request shape of " + std::to_string(small.keys) + " keys: nothing verified");
  }
  for (bool lookup : {true, false}) {
    const std::string what = lookup ? "lookup" : "load";
    Figure f = Fig(
        "guard_request_" + what + "_cpu_per_key_" + std::to_string(config.keys) + "_vs_" + std::to_string(small.keys),
        "guard: both daemons' CPU per key, " + what + " of one request of " + std::to_string(config.keys) + " vs " +
            std::to_string(small.keys) + " keys, 16KiB",
        "us", MedianPerKey(large, config.keys, lookup));
    f.baseline = MedianPerKey(samples, small.keys, lookup);
    f.baseline_name = std::to_string(small.keys) + " keys";
    f.Aim(Goal::kRatioMax, 2, "<= 2x per key (<= 16x the request)");
    f.guard = *f.baseline > 0;  // 0 under --daemon-wrapper: the CPU is the wrapper's
    report.Add(f);
  }
}

// One request of `request_keys` 36-byte keys, at 16 KiB and 64 KiB blocks.
void RunShapesPart(const std::string& binary, const std::string& dir, const Options& options, const Sizes& sizes,
                   Report& report, std::vector<std::string>* problems) {
  ShapeConfig config;
  config.keys = sizes.request_keys;
  config.repeats = sizes.rounds;
  config.retry_pace_us = kPaceUs;
  config.verify_all = options.smoke;
  const std::string shape = std::to_string(config.keys) + " keys of 36 B";
  for (uint64_t block : {16 * kKiB, 64 * kKiB}) {
    const std::string name = SizeName(block);
    Progress("daemons: one request of " + shape + ", lookup and load, " + name + " blocks");
    DaemonOptions daemon;
    daemon.binary = binary;
    daemon.block_len = block;
    daemon.extra_args = options.daemon_args;
    daemon.wrapper = options.daemon_wrapper;
    const std::vector<ShapeSample> samples = MeasureRequestShape(daemon, dir, config);
    ReportShape(name, shape, config, block, samples, report, problems);
    if (block == 16 * kKiB) AddKeyScalingGuards(daemon, dir, config, samples, report, problems);
  }
}

// CI guard: consumer CPU per request in the largest warm burst against the
// next one down. Per-request work that grows with the requests in flight
// (an O(n) scan per request) shows as a ratio far above 2 on any machine.
void AddBurstGuard(const std::map<int, double>& cpu_by_n, Report& report) {
  if (cpu_by_n.size() < 3) return;  // {1, small, large} at least
  const auto large = std::prev(cpu_by_n.end());
  const auto small = std::prev(large);
  Figure f = Fig("guard_burst_cpu_per_request_" + std::to_string(large->first) + "_vs_" + std::to_string(small->first),
                 "guard: consumer CPU per request, burst of " + std::to_string(large->first) + " vs " +
                     std::to_string(small->first) + " (warm slots, 1 peer)",
                 "us", large->second);
  f.baseline = small->second;
  f.baseline_name = "burst of " + std::to_string(small->first);
  f.Aim(Goal::kRatioMax, 2, "<= 2x");
  f.guard = small->second > 0;  // 0 under --daemon-wrapper: the CPU is the wrapper's
  report.Add(f);
}

void RunConcurrencyPart(const std::string& binary, const std::string& dir, const Options& options, const Sizes& sizes,
                        const Baselines& base, Report& report, std::vector<std::string>* problems) {
  constexpr uint64_t kBlock = 64 * kKiB;
  constexpr uint64_t kSourceBlocks = 16;
  const int max_peers = sizes.peer_counts.back();
  const int max_n = sizes.concurrency.back();
  Progress("daemons: starting 1 consumer and " + std::to_string(max_peers) + " producers");
  DaemonOptions daemon;
  daemon.binary = binary;
  daemon.block_len = kBlock;
  daemon.extra_args = options.daemon_args;
  // Background loads must outlive the whole part.
  daemon.extra_args.insert(daemon.extra_args.end(), {"--load-timeout-s", "3600"});
  daemon.wrapper = options.daemon_wrapper;
  Cluster cluster(daemon, dir, max_peers, kSourceBlocks);
  cluster.ConnectAll();
  const int64_t consumer_idle_kb = cluster.consumer().RssAnonKb();
  const int64_t producers_idle_kb = cluster.ProducersRssAnonKb();

  auto background = std::make_shared<Region>(static_cast<uint64_t>(max_n), kBlock);
  ConsumerEngine probe(cluster.consumer().socket_path(), kBlock, "bench-probe", std::make_shared<Region>(64, kBlock));
  json::object in_flight_details, burst_details;
  std::map<int, InFlightResult> rss_pass;  // first peer count, by N
  for (int peers : sizes.peer_counts) {
    double p50_at_1 = 0;
    for (int n : sizes.concurrency) {
      Progress("daemons: lookup+load with " + std::to_string(n) + " requests in flight, " + std::to_string(peers) +
               " peers");
      const std::string tag = "if-" + std::to_string(peers) + "-" + std::to_string(n);
      InFlightResult r = MeasureWithInFlight(cluster, probe, background, peers, n, sizes.probes, tag);
      const double p50 = Percentile(r.latencies_us, 0.5);
      if (n == 1) p50_at_1 = p50;
      if (peers == sizes.peer_counts.front()) rss_pass[n] = r;
      const std::string where =
          std::to_string(n) + " in flight, " + std::to_string(peers) + " peer" + (peers > 1 ? "s" : "");
      Figure f = Fig("lookup_load_p50_us_inflight_" + std::to_string(n) + "_peers_" + std::to_string(peers),
                     "lookup+load p50, " + where, "us", p50);
      if (n == 1) {
        f.baseline = Percentile(base.tcp_rtt, 0.5);
        f.baseline_name = "TCP RTT p50";
      } else {
        f.baseline = p50_at_1;
        f.baseline_name = "same, 1 in flight";
        f.Aim(Goal::kRatioMax, 2, "<= 2x");
      }
      report.Add(f);
      json::object d = Summary(r.latencies_us);
      d["consumer_rss_anon_kb"] = r.consumer_rss_anon_kb;
      d["producers_rss_anon_kb"] = r.producers_rss_anon_kb;
      d["verified_blocks"] = r.verified_blocks;
      in_flight_details[tag] = std::move(d);
      if (r.latencies_us.empty() || r.verified_blocks == 0) problems->push_back(tag + ": no verified probe");
    }
  }

  // RSS per 1000 in-flight requests, from the first pass (before any later
  // pass could reuse freed heap).
  const auto& low = rss_pass.at(sizes.concurrency.front());
  const auto& high = rss_pass.at(max_n);
  const double per_1000 = 1000.0 / static_cast<double>(max_n - sizes.concurrency.front());
  Figure rss_c = Fig("consumer_rss_kb_per_1000_inflight", "consumer daemon RSS (anon) per 1000 in-flight requests",
                     "KiB", static_cast<double>(high.consumer_rss_anon_kb - low.consumer_rss_anon_kb) * per_1000);
  rss_c.baseline = static_cast<double>(consumer_idle_kb);
  rss_c.baseline_name = "idle daemon RSS";
  report.Add(rss_c);
  Figure rss_p = Fig("producer_rss_kb_per_1000_inflight", "producer daemons' RSS (anon) per 1000 in-flight requests",
                     "KiB", static_cast<double>(high.producers_rss_anon_kb - low.producers_rss_anon_kb) * per_1000);
  rss_p.baseline = static_cast<double>(producers_idle_kb) / max_peers;
  rss_p.baseline_name = "idle daemon RSS";
  report.Add(rss_p);

  auto burst_region = std::make_shared<Region>(static_cast<uint64_t>(max_n), kBlock);
  ConsumerEngine burst_engine(cluster.consumer().socket_path(), kBlock, "bench-burst", burst_region);
  // Every burst row runs on warm slots: one untimed burst first writes each
  // slot through the consumer daemon's mapping, so no row pays the first
  // touches (before, whichever burst ran first did: issue 27).
  RunBurst(cluster, burst_engine, sizes.peer_counts.front(), max_n, "burst-warm");
  std::map<int, double> cpu_by_n;  // consumer CPU per request, first peer count
  for (int peers : sizes.peer_counts) {
    double p50_at_1 = 0;
    for (int n : sizes.concurrency) {
      Progress("daemons: burst of " + std::to_string(n) + " lookup+load requests, " + std::to_string(peers) + " peers");
      const std::string tag = "burst-" + std::to_string(peers) + "-" + std::to_string(n);
      // Small bursts are repeated so every row has about `probes` samples.
      BurstResult r;
      const int repeats = std::max(1, sizes.probes / n);
      const int64_t consumer_cpu0 = cluster.consumer().CpuNs();
      for (int k = 0; k < repeats; ++k) {
        BurstResult one = RunBurst(cluster, burst_engine, peers, n, tag + "-" + std::to_string(k));
        r.latencies_us.insert(r.latencies_us.end(), one.latencies_us.begin(), one.latencies_us.end());
        r.seconds += one.seconds;
        r.verified_blocks += one.verified_blocks;
      }
      const double p50 = Percentile(r.latencies_us, 0.5);
      if (n == 1) p50_at_1 = p50;
      const std::string where =
          std::to_string(n) + " at once, " + std::to_string(peers) + " peer" + (peers > 1 ? "s" : "");
      Figure f = Fig("lookup_load_p50_us_burst_" + std::to_string(n) + "_peers_" + std::to_string(peers),
                     "lookup+load p50, " + where, "us", p50);
      f.baseline = n == 1 ? Percentile(base.tcp_rtt, 0.5) : p50_at_1;
      f.baseline_name = n == 1 ? "TCP RTT p50" : "same, 1 at once";
      report.Add(f);
      const double consumer_cpu_us =
          static_cast<double>(cluster.consumer().CpuNs() - consumer_cpu0) / 1e3 / (static_cast<double>(n) * repeats);
      if (peers == sizes.peer_counts.front()) cpu_by_n[n] = consumer_cpu_us;
      if (n == max_n) {
        // Issue 14's goals, for one peer (docs/performance.md, "The targets").
        Figure cpu = Fig("burst_consumer_cpu_us_per_request_" + std::to_string(n) + "_peers_" + std::to_string(peers),
                         "consumer daemon CPU per lookup+load, " + where, "us", consumer_cpu_us);
        Figure rate = Fig("burst_requests_per_s_" + std::to_string(n) + "_peers_" + std::to_string(peers),
                          "lookup+load throughput, " + where, "req/s", r.seconds > 0 ? n * repeats / r.seconds : 0.0);
        if (peers == 1) {
          cpu.Aim(Goal::kValueMax, 30, "<= 30 us");
          rate.Aim(Goal::kValueMin, 40000, ">= 40000 req/s");
        }
        report.Add(cpu);
        report.Add(rate);
      }
      json::object d = Summary(r.latencies_us);
      d["seconds"] = r.seconds;
      d["repeats"] = repeats;
      d["consumer_cpu_us_per_request"] = consumer_cpu_us;
      d["requests_per_s"] = r.seconds > 0 ? n * repeats / r.seconds : 0.0;
      d["verified_blocks"] = r.verified_blocks;
      burst_details[tag] = std::move(d);
      if (r.verified_blocks != static_cast<uint64_t>(n) * repeats) {
        problems->push_back(tag + ": not every block verified");
      }
    }
  }
  report.details()["in_flight"] = std::move(in_flight_details);
  report.details()["burst"] = std::move(burst_details);
  AddBurstGuard(cpu_by_n, report);
}

int Run(int argc, char** argv) {
  Options options;
  if (!ParseArgs(argc, argv, &options)) {
    std::cerr << Usage();
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  const Sizes sizes = WithOverrides(options.smoke ? SmokeSizes() : FullSizes(), options);
  const std::string binary = FindDaemon(options, argv[0]);
  char dir_template[] = "/tmp/kvpeer-bench.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) throw BenchError("mkdtemp: " + ErrnoText(errno));
  const std::string dir = dir_template;
  const std::string mode = options.smoke ? "smoke" : "full";
  Progress(mode + " run, kvpeerd " + binary + ", scratch " + dir);

  Report report;
  report.details()["machine"] = MachineText();
  report.details()["kvpeerd"] = binary;
  std::vector<std::string> problems;
  const int64_t started = NowNs();
  const double load_before = LoadAverage();
  int status = 0;
  try {
    const bool all = options.only.empty();
    Baselines base = RunBaselines(sizes, report);
    if (all || options.only == "bulk" || options.only == "latency")
      RunBulkPart(binary, dir, options, sizes, base, report, &problems);
    if (all || options.only == "shapes") RunShapesPart(binary, dir, options, sizes, report, &problems);
    if (all || options.only == "concurrency") {
      RunConcurrencyPart(binary, dir, options, sizes, base, report, &problems);
    }
  } catch (const std::exception& e) {
    problems.push_back(e.what());
  }
  for (const Figure& f : report.figures()) {
    if (!std::isfinite(f.value) || f.value < 0) problems.push_back(f.id + " is not a sane number");
    if (f.guard && f.Met() == false) {
      problems.push_back("guard " + f.id + " failed: " + std::to_string(f.Ratio().value_or(0)) + "x, allowed " +
                         f.target_text + " (a per-request or per-key cost grew with the load)");
    }
  }
  const double seconds = static_cast<double>(NowNs() - started) / 1e9;
  report.details()["seconds"] = seconds;
  report.details()["loadavg_before"] = load_before;
  report.details()["loadavg_after"] = LoadAverage();
  report.details()["problems"] = json::array(problems.begin(), problems.end());

  std::cout << "kvpeer-bench (" << mode << ", " << MachineText() << ", " << static_cast<int>(seconds) << " s)\n\n"
            << report.Table();
  if (load_before > 0.5) {
    std::cout << "\nWARNING: the 1-minute load average was " << load_before
              << " before the run: other work shared the CPUs, so these figures are not the machine's.\n";
  }
  const json::object out = report.Json(mode);
  const auto& targets = out.at("targets").as_object();
  std::cout << "\ntargets met: " << targets.at("met").as_uint64() << " of " << targets.at("total").as_uint64() << "\n";
  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    file << json::serialize(out) << "\n";
    if (!file) {
      problems.push_back("cannot write " + options.json_path);
    }
  }
  if (!problems.empty()) {
    for (const auto& problem : problems) std::cerr << "kvpeer-bench: FAILED: " << problem << "\n";
    std::cerr << "kvpeer-bench: daemon logs are in " << dir << "\n";
    status = 1;
  } else if (!options.keep_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return status;
}

}  // namespace
}  // namespace kvpeer::bench

int main(int argc, char** argv) {
  try {
    return kvpeer::bench::Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kvpeer-bench: " << e.what() << "\n";
    return 1;
  }
}
