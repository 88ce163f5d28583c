#include "daemon/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

namespace kvpeer::daemon::metrics {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// Length of the valid UTF-8 sequence at the start of `s`, or 0.
size_t Utf8SequenceLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint32_t code = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    code = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    code = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  static constexpr uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kMinimum[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

// HELP text: backslash and newline escaped (quotes stay as they are).
std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void CheckBounds(const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) throw std::logic_error("histogram bucket bound is not finite");
    if (i > 0 && !(bounds[i - 1] < bounds[i])) throw std::logic_error("histogram bucket bounds must increase");
  }
}

// {a="x",b="y"} for the label names and values (plus `extra` if given), or
// "" when there are none.
void WriteLabels(std::string* out, const std::vector<std::string>& names, const std::vector<std::string>& values,
                 std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return;
  out->push_back('{');
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out->push_back(',');
    *out += names[i];
    *out += "=\"";
    *out += EscapeLabelValue(values[i]);
    out->push_back('"');
  }
  if (!extra_name.empty()) {
    if (!names.empty()) out->push_back(',');
    *out += extra_name;
    *out += "=\"";
    *out += EscapeLabelValue(extra_value);
    out->push_back('"');
  }
  out->push_back('}');
}

}  // namespace

// ---------------------------------------------------------------------------
// Helpers

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || !(IsNameStart(name.front()) || name.front() == ':')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsNameChar(c) || c == ':'; });
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || !IsNameStart(name.front()) || name.starts_with("__")) return false;
  return std::all_of(name.begin(), name.end(), IsNameChar);
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  while (!value.empty()) {
    const size_t length = Utf8SequenceLength(value);
    if (length == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for a byte that is not valid UTF-8
      value.remove_prefix(1);
      continue;
    }
    const char c = value.front();
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.append(value.substr(0, length));
    }
    value.remove_prefix(length);
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integers up to 2^53 exactly, without an exponent or a decimal point.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return fmt::format("{}", static_cast<int64_t>(value));
  }
  return fmt::format("{}", value);
}

// ---------------------------------------------------------------------------
// Histogram

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  CheckBounds(bounds_);
}

void Histogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  ++count_;
  sum_ += value;
}

void Histogram::Merge(const Histogram& other) {
  if (other.bounds_ != bounds_) throw std::logic_error("merging histograms with different buckets");
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
}

// ---------------------------------------------------------------------------
// Family

Family::Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
               std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

void Family::CheckArity(size_t n) const {
  if (n != label_names_.size()) {
    throw std::logic_error(fmt::format("metric {}: {} label values for {} label names", name_, n, label_names_.size()));
  }
}

std::vector<std::string> Family::Key(std::initializer_list<std::string_view> label_values) const {
  CheckArity(label_values.size());
  return std::vector<std::string>(label_values.begin(), label_values.end());
}

void Family::Add(std::initializer_list<std::string_view> label_values, uint64_t n) {
  if (type_ != Type::kCounter) throw std::logic_error("metric " + name_ + ": Add on a non-counter");
  counters_[Key(label_values)] += n;
}

void Family::Set(std::initializer_list<std::string_view> label_values, double value) {
  if (type_ != Type::kGauge) throw std::logic_error("metric " + name_ + ": Set on a non-gauge");
  gauges_[Key(label_values)] = value;
}

void Family::Merge(std::initializer_list<std::string_view> label_values, const metrics::Histogram& histogram) {
  if (type_ != Type::kHistogram) throw std::logic_error("metric " + name_ + ": Merge on a non-histogram");
  std::vector<std::string> key = Key(label_values);
  auto it = histograms_.find(key);
  if (it == histograms_.end()) it = histograms_.emplace(std::move(key), metrics::Histogram(bounds_)).first;
  it->second.Merge(histogram);
}

size_t Family::sample_count() const { return counters_.size() + gauges_.size() + histograms_.size(); }

void Family::WriteText(std::string* out) const {
  if (sample_count() == 0) return;
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name_, EscapeHelp(help_), name_,
                 TypeName(type_));
  for (const auto& [labels, value] : counters_) {
    *out += name_;
    WriteLabels(out, label_names_, labels);
    fmt::format_to(std::back_inserter(*out), " {}\n", value);
  }
  for (const auto& [labels, value] : gauges_) {
    *out += name_;
    WriteLabels(out, label_names_, labels);
    fmt::format_to(std::back_inserter(*out), " {}\n", FormatValue(value));
  }
  for (const auto& [labels, histogram] : histograms_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      cumulative += histogram.bucket_counts()[i];
      *out += name_;
      *out += "_bucket";
      WriteLabels(out, label_names_, labels, "le", i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf");
      fmt::format_to(std::back_inserter(*out), " {}\n", cumulative);
    }
    *out += name_;
    *out += "_sum";
    WriteLabels(out, label_names_, labels);
    fmt::format_to(std::back_inserter(*out), " {}\n", FormatValue(histogram.sum()));
    *out += name_;
    *out += "_count";
    WriteLabels(out, label_names_, labels);
    fmt::format_to(std::back_inserter(*out), " {}\n", histogram.count());
  }
}

// ---------------------------------------------------------------------------
// Registry

Registry::Registry() = default;
Registry::~Registry() = default;

Family& Registry::Declare(std::string_view name, std::string_view help, Type type, std::vector<std::string> label_names,
                          std::vector<double> bounds) {
  for (const auto& family : families_) {
    if (family->name_ != name) continue;
    if (family->type_ != type || family->help_ != help || family->label_names_ != label_names ||
        family->bounds_ != bounds) {
      throw std::logic_error("metric " + std::string(name) + " declared twice, differently");
    }
    return *family;
  }
  if (!IsValidMetricName(name)) throw std::logic_error("invalid metric name '" + std::string(name) + "'");
  for (const std::string& label : label_names) {
    if (!IsValidLabelName(label) || (type == Type::kHistogram && label == "le")) {
      throw std::logic_error("metric " + std::string(name) + ": invalid label name '" + label + "'");
    }
    if (std::count(label_names.begin(), label_names.end(), label) > 1) {
      throw std::logic_error("metric " + std::string(name) + ": label '" + label + "' named twice");
    }
  }
  // A histogram's _bucket, _sum and _count samples must not collide with another family.
  const auto derived = [](std::string_view base, Type kind) {
    std::vector<std::string> names;
    if (kind == Type::kHistogram) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) names.push_back(std::string(base) + suffix);
    }
    return names;
  };
  for (const auto& family : families_) {
    const std::vector<std::string> ours = derived(name, type);
    const std::vector<std::string> theirs = derived(family->name_, family->type_);
    if (std::find(ours.begin(), ours.end(), family->name_) != ours.end() ||
        std::find(theirs.begin(), theirs.end(), name) != theirs.end()) {
      throw std::logic_error("metric " + std::string(name) + " collides with " + family->name_);
    }
  }
  if (type == Type::kHistogram) CheckBounds(bounds);
  families_.push_back(std::unique_ptr<Family>(
      new Family(std::string(name), std::string(help), type, std::move(label_names), std::move(bounds))));
  return *families_.back();
}

Family& Registry::Counter(std::string_view name, std::string_view help, std::vector<std::string> label_names) {
  return Declare(name, help, Type::kCounter, std::move(label_names), {});
}

Family& Registry::Gauge(std::string_view name, std::string_view help, std::vector<std::string> label_names) {
  return Declare(name, help, Type::kGauge, std::move(label_names), {});
}

Family& Registry::Histogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                            std::vector<std::string> label_names) {
  return Declare(name, help, Type::kHistogram, std::move(label_names), std::move(bounds));
}

const Family* Registry::Find(std::string_view name) const {
  for (const auto& family : families_) {
    if (family->name_ == name) return family.get();
  }
  return nullptr;
}

std::string Registry::Text() const {
  std::string out;
  for (const auto& family : families_) family->WriteText(&out);
  return out;
}

}  // namespace kvpeer::daemon::metrics
