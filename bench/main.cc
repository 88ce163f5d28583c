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

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <boost/json/serialize.hpp>

#include "bench/options.h"
#include "bench/parts.h"
#include "bench/report.h"
#include "bench/util.h"

namespace kvpeer::bench {
namespace {

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

// The 1-minute load average: other work on the machine skews every figure.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return load;
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
