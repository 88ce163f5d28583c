// The parts kvpeer-bench runs (--only names them): the baselines, the bulk
// part (with, on its first pair, the idle latency), the request shapes and
// the concurrency part. Each adds its figures to the report and what went
// wrong to `problems`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "bench/options.h"
#include "bench/report.h"
#include "bench/util.h"

namespace kvpeer::bench {

namespace json = boost::json;

// Pause between paced samples: an engine's scheduler steps are this far
// apart or more, so the daemons go idle between requests.
inline constexpr int64_t kPaceUs = 200;

inline json::object Summary(const std::vector<double>& samples) {
  double sum = 0;
  for (double s : samples) sum += s;
  return json::object{
      {"count", samples.size()},         {"p50", Percentile(samples, 0.5)},
      {"p90", Percentile(samples, 0.9)}, {"p99", Percentile(samples, 0.99)},
      {"max", Percentile(samples, 1.0)}, {"mean", samples.empty() ? 0.0 : sum / static_cast<double>(samples.size())}};
}

inline std::string SizeName(uint64_t bytes) {
  return bytes >= kMiB ? std::to_string(bytes / kMiB) + "MiB" : std::to_string(bytes / kKiB) + "KiB";
}

struct Baselines {
  std::vector<double> tcp_rtt, unix_rtt;
  std::vector<double> tcp_rtt_paced;  // with kPaceUs between round trips
  std::vector<double> unix_rtt_paced;
  double unix_echo_cpu_us = 0;  // the Unix echo thread's CPU per round trip
  double memcpy_gbps = 0;
};

Baselines RunBaselines(const Sizes& sizes, Report& report);
void RunBulkPart(const std::string& binary, const std::string& dir, const Options& options, const Sizes& sizes,
                 const Baselines& base, Report& report, std::vector<std::string>* problems);
void RunShapesPart(const std::string& binary, const std::string& dir, const Options& options, const Sizes& sizes,
                   Report& report, std::vector<std::string>* problems);
void RunConcurrencyPart(const std::string& binary, const std::string& dir, const Options& options, const Sizes& sizes,
                        const Baselines& base, Report& report, std::vector<std::string>* problems);

}  // namespace kvpeer::bench
