// Latency of lookup+load as the number of concurrent requests and of peer
// daemons grows.
//
// One consumer daemon and up to 16 producer daemons (each with a source
// engine publishing `source_blocks` blocks). Two ways to load the consumer
// with N concurrent requests, both reported:
//
// * in flight: N-1 background requests each have a load in flight (a
//   disaggregated-prefill load whose supply never comes, so it stays open on
//   both daemons: engine job, client-role load, server-role round), spread
//   over the P peers; a probe request then runs lookup+load to completion,
//   one at a time. This is what an engine with N requests in progress sees
//   for each new one, and what the daemon's RSS per in-flight request is
//   measured on.
// * burst: N requests start at the same instant (pipelined lookups, one
//   flush, loads as the hits arrive, results by poll); each one's latency
//   is start to result. All N compete for the one daemon thread, so this
//   shows the daemon's request throughput (Little's law).
//
// Thread-safety: single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/daemon_process.h"
#include "bench/scenarios.h"

namespace kvpeer::bench {

class Cluster {
 public:
  // Starts the consumer and `producers` producer daemons like `daemon`
  // (binary, block_len, arguments; sockets and logs go to `dir`), and a
  // source engine on every producer (key space p + 1 on producer p).
  Cluster(const DaemonOptions& daemon, const std::string& dir, int producers, uint64_t source_blocks);
  ~Cluster();

  DaemonProcess& consumer() { return *consumer_; }
  std::vector<std::unique_ptr<DaemonProcess>>& producers() { return producers_; }
  uint64_t block_len() const { return block_len_; }
  uint64_t source_blocks() const { return source_blocks_; }
  // Makes the consumer connect to every producer (connect op).
  void ConnectAll();
  // Sum of rounds_serving over producers [0, count) (status op).
  int64_t RoundsServing(int count);
  // Sum of RssAnon of the producers, KiB.
  int64_t ProducersRssAnonKb() const;

 private:
  uint64_t block_len_;
  uint64_t source_blocks_;
  std::unique_ptr<DaemonProcess> consumer_;
  std::vector<std::unique_ptr<DaemonProcess>> producers_;
  std::vector<std::unique_ptr<SourceEngine>> sources_;
};

struct InFlightResult {
  std::vector<double> latencies_us;
  int64_t consumer_rss_anon_kb = 0;
  int64_t producers_rss_anon_kb = 0;
  uint64_t verified_blocks = 0;
};

// `background_region` has at least N-1 blocks; `probe` is a consumer engine
// with its own region.
InFlightResult MeasureWithInFlight(Cluster& cluster, ConsumerEngine& probe,
                                   const std::shared_ptr<Region>& background_region, int peers, int in_flight,
                                   int probes, const std::string& tag);

struct BurstResult {
  std::vector<double> latencies_us;
  double seconds = 0;  // start to the last result
  uint64_t verified_blocks = 0;
};

// `engine`'s region has at least N blocks.
BurstResult RunBurst(Cluster& cluster, ConsumerEngine& engine, int peers, int requests, const std::string& tag);

}  // namespace kvpeer::bench
