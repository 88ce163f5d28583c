// The benchmark's result: figures with their baselines, ratios and targets,
// printed as a table and written as JSON.
//
// Thread-safety: none; filled by the main thread.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "bench/spread.h"

namespace kvpeer::bench {

// How a figure is compared with its target.
enum class Goal {
  kNone,      // reported only
  kRatioMin,  // ratio >= target (throughput)
  kRatioMax,  // ratio <= target (CPU, latency ratio)
  kValueMax,  // value <= target (absolute bound in the value's unit)
  kValueMin,  // value >= target (a ratio measured pair by pair is its own value)
};

struct Figure {
  std::string id;    // stable key, e.g. "bulk_1MiB_GBps"
  std::string name;  // what the table shows
  std::string unit;
  double value = 0;
  std::optional<double> baseline;
  std::string baseline_name;  // what the baseline is
  Goal goal = Goal::kNone;
  double target = 0;
  std::string target_text;  // as the issue states it

  // Gives the figure its target: `goal` says how `target` is compared
  // (with the ratio or the value), `text` how the table shows it.
  void Aim(Goal how, double value, std::string text) {
    goal = how;
    target = value;
    target_text = std::move(text);
  }
  // For a figure measured several times (value is then the median).
  std::optional<Spread> spread;
  // A CI guard (issue 27 item 5): a ratio of two figures of the same run
  // that holds on any machine unless the code got slower per frame, per
  // request or per key. Unlike a target, a guard that is not met fails the
  // run (the smoke run too).
  bool guard = false;

  std::optional<double> Ratio() const;
  // Empty for Goal::kNone.
  std::optional<bool> Met() const;
};

// A figure without baseline or target yet.
Figure Fig(std::string id, std::string name, std::string unit, double value);
// The median of `samples` with their spread.
Figure MedianFigure(std::string id, std::string name, std::string unit, const std::vector<double>& samples);

// A spread as JSON: count, min, q1, median, q3, max, iqr.
boost::json::object SpreadJson(const Spread& spread);

class Report {
 public:
  void Add(Figure figure) { figures_.push_back(std::move(figure)); }
  // Free-form details kept in the JSON (raw samples' summaries, settings).
  boost::json::object& details() { return details_; }
  const std::vector<Figure>& figures() const { return figures_; }

  // The table, one figure a line.
  std::string Table() const;
  boost::json::object Json(const std::string& mode) const;

 private:
  std::vector<Figure> figures_;
  boost::json::object details_;
};

}  // namespace kvpeer::bench
