// Two daemons, one producer (A) and one consumer (B), with the engines the
// bulk and latency measurements drive; and a bulk round's figures on them.
#pragma once

#include <memory>
#include <string>

#include <boost/json/object.hpp>

#include "bench/daemon_process.h"
#include "bench/options.h"
#include "bench/parts.h"
#include "bench/scenarios.h"

namespace kvpeer::bench {

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

BulkFigures MeasuredBulk(Pair& pair, const BulkConfig& config, const std::string& tag);
boost::json::object BulkJson(const BulkFigures& f);

// The idle latency (--only latency): peer lookups, one call and two, back
// to back and paced, and control ops, with the daemons' CPU per op.
void MeasureIdleLatency(Pair& pair, const Sizes& sizes, const Baselines& base, Report& report,
                        std::vector<std::string>* problems);

}  // namespace kvpeer::bench
