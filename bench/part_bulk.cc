// The bulk part: interleaved pairs of bulk rounds, raw TCP then the
// daemons, at 1 MiB and 64 KiB blocks; at 1 MiB also the cold first pass,
// the cost of checksums and of sealing, and lookups during a bulk fetch.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "bench/baselines.h"
#include "bench/pair.h"
#include "bench/parts.h"
#include "bench/round_length.h"
#include "bench/spread.h"

namespace kvpeer::bench {

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

namespace {

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

}  // namespace

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
      MeasureIdleLatency(pair, sizes, base, report, problems);
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

}  // namespace kvpeer::bench
