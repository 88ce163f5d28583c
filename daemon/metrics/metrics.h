// metrics: a small metrics registry and its Prometheus text exposition
// (format version 0.0.4).
//
// A Registry holds metric families in registration order. A family has a
// name, a help text, a type (counter, gauge or histogram) and fixed label
// names; its samples are keyed by label values. The daemon builds a fresh
// Registry for every scrape: each component adds the values it keeps
// (plain integers and Histogram members, updated on the event loop without
// maps on the hot path), and Text() writes the exposition:
//
//   * "# HELP" and "# TYPE" once per family, before its samples; a family
//     without samples is left out;
//   * label values escaped (\\, \", \n), invalid UTF-8 replaced by U+FFFD;
//   * histograms as cumulative _bucket{le="..."} samples ending with
//     le="+Inf" (equal to _count), then _sum and _count;
//   * samples of a family sorted by label values, so the text is stable.
//
// Names are checked when a family is declared (metric names
// [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* not starting
// with "__", "le" reserved for histograms, bucket bounds finite and strictly
// increasing); a bad name or a redeclaration with another type, help or
// labels is a programming error and throws std::logic_error.
//
// Thread-safety: none; everything runs on the daemon's one event loop.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvpeer::daemon::metrics {

// Buckets are chosen once, at construction. Observe is a short scan of the
// bounds (a dozen or so) and two additions.
class Histogram {
 public:
  // REQUIRES: bounds finite and strictly increasing (checked; throws
  // std::logic_error). The +Inf bucket is implicit.
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double value);
  // Adds another histogram's observations. REQUIRES: the same bounds.
  void Merge(const Histogram& other);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts: one per bound, then the +Inf bucket.
  const std::vector<uint64_t>& bucket_counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

enum class Type { kCounter, kGauge, kHistogram };

// One metric family. Samples are keyed by label values, in the order of the
// family's label names.
class Family {
 public:
  const std::string& name() const { return name_; }
  Type type() const { return type_; }

  // Counter: adds `n` to the sample (created at 0).
  void Add(std::initializer_list<std::string_view> label_values, uint64_t n);
  // Gauge: sets the sample.
  void Set(std::initializer_list<std::string_view> label_values, double value);
  // Histogram: merges `histogram` into the sample. REQUIRES: the family's
  // bounds.
  void Merge(std::initializer_list<std::string_view> label_values, const Histogram& histogram);

  size_t sample_count() const;

 private:
  friend class Registry;
  Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
         std::vector<double> bounds);
  std::vector<std::string> Key(std::initializer_list<std::string_view> label_values) const;
  void CheckArity(size_t n) const;
  void WriteText(std::string* out) const;

  std::string name_;
  std::string help_;
  Type type_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;  // histograms
  std::map<std::vector<std::string>, uint64_t> counters_;
  std::map<std::vector<std::string>, double> gauges_;
  std::map<std::vector<std::string>, Histogram> histograms_;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Declares a family, or returns the one declared before under the same
  // name (which must agree in type, help and labels).
  Family& Counter(std::string_view name, std::string_view help, std::vector<std::string> label_names = {});
  Family& Gauge(std::string_view name, std::string_view help, std::vector<std::string> label_names = {});
  Family& Histogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                    std::vector<std::string> label_names = {});

  // Null when not declared.
  const Family* Find(std::string_view name) const;

  // The exposition: text/plain; version=0.0.4.
  std::string Text() const;

 private:
  Family& Declare(std::string_view name, std::string_view help, Type type, std::vector<std::string> label_names,
                  std::vector<double> bounds);

  std::vector<std::unique_ptr<Family>> families_;
};

// The Content-Type of Registry::Text().
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Exposition helpers, exposed for tests.
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);
// A label value as it appears between the quotes.
std::string EscapeLabelValue(std::string_view value);
// A sample value: integers exactly, others shortest round-trip, "+Inf",
// "-Inf", "NaN".
std::string FormatValue(double value);

}  // namespace kvpeer::daemon::metrics
