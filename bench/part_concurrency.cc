// The concurrency part: lookup+load latency with many requests in flight
// and in bursts, across peer counts, the daemons' RSS per request, and the
// CI guard that per-request CPU does not grow with the burst.
#include <algorithm>
#include <iterator>
#include <map>
#include <memory>

#include "bench/concurrency.h"
#include "bench/parts.h"

namespace kvpeer::bench {
namespace {

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

}  // namespace

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

}  // namespace kvpeer::bench
