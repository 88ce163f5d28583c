// A strict checker of the Prometheus text exposition format, version 0.0.4
// (the format Prometheus's own text parser accepts), for the metrics tests.
// Stricter than Prometheus where kvpeerd's output has no reason to differ:
// no comments other than HELP and TYPE, no timestamps, no empty lines, no
// trailing commas in label sets, HELP and TYPE for every family.
//
// CheckExposition returns every problem found, one string each, naming the
// line; an empty result means the text is well formed:
//   * every line is "# HELP name text", "# TYPE name type" or a sample
//     "name{label="value",...} value", with valid names, escapes and values;
//   * text ends with a newline;
//   * a family has at most one HELP and one TYPE, both before its first
//     sample; its samples form one group (no other family in between);
//   * a sample belongs to the family announced for it: NAME for counters
//     and gauges, NAME_bucket / NAME_sum / NAME_count for histograms;
//   * no series (name and label set) appears twice; no label twice in one
//     sample; "le" only on histogram buckets;
//   * counters and histogram counts are not negative, not NaN;
//   * per histogram series: buckets with increasing le ending in +Inf,
//     cumulative counts that never decrease, +Inf equal to _count, and
//     _sum and _count present.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvpeer::daemon::testing {

struct ParsedSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // unescaped values, in order
  double value = 0;
};

namespace exposition_detail {

inline bool NameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
inline bool NameChar(char c) { return NameStart(c) || (c >= '0' && c <= '9'); }

inline bool ValidMetricName(std::string_view name) {
  if (name.empty() || !NameStart(name[0])) return false;
  for (char c : name) {
    if (!NameChar(c)) return false;
  }
  return true;
}

inline bool ValidLabelName(std::string_view name) {
  if (name.empty() || !(NameStart(name[0]) && name[0] != ':')) return false;
  for (char c : name) {
    if (!NameChar(c) || c == ':') return false;
  }
  return true;
}

// A Go-ParseFloat-compatible value as Prometheus writes it.
inline std::optional<double> ParseValue(const std::string& text) {
  if (text == "+Inf" || text == "Inf") return HUGE_VAL;
  if (text == "-Inf") return -HUGE_VAL;
  if (text == "NaN") return std::nan("");
  if (text.empty()) return std::nullopt;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE) return std::nullopt;
  return value;
}

// Parses `line` as a sample; "" or why not.
inline std::string ParseSampleLine(std::string_view line, ParsedSample* sample) {
  size_t i = 0;
  while (i < line.size() && NameChar(line[i])) ++i;
  sample->name = std::string(line.substr(0, i));
  if (!ValidMetricName(sample->name)) return "invalid metric name";
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      size_t start = i;
      while (i < line.size() && NameChar(line[i])) ++i;
      std::string label(line.substr(start, i - start));
      if (!ValidLabelName(label)) return "invalid label name '" + label + "'";
      if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return "label " + label + " without =\"";
      i += 2;
      std::string value;
      for (;;) {
        if (i >= line.size()) return "unterminated label value";
        char c = line[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= line.size()) return "unterminated escape";
          char e = line[i++];
          if (e == '\\') {
            value += '\\';
          } else if (e == '"') {
            value += '"';
          } else if (e == 'n') {
            value += '\n';
          } else {
            return std::string("invalid escape \\") + e;
          }
        } else {
          value += c;
        }
      }
      for (const auto& [name, unused] : sample->labels) {
        if (name == label) return "label " + label + " twice";
      }
      sample->labels.emplace_back(label, value);
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      return "expected , or } after a label";
    }
  }
  if (i >= line.size() || line[i] != ' ') return "expected one space before the value";
  ++i;
  std::string value_text(line.substr(i));
  if (value_text.find(' ') != std::string::npos) return "unexpected text after the value (timestamps are not used)";
  std::optional<double> value = ParseValue(value_text);
  if (!value) return "invalid value '" + value_text + "'";
  sample->value = *value;
  return "";
}

inline std::string LabelKey(const std::vector<std::pair<std::string, std::string>>& labels, bool skip_le) {
  std::map<std::string, std::string> sorted;
  for (const auto& [name, value] : labels) {
    if (!(skip_le && name == "le")) sorted[name] = value;
  }
  std::string key;
  for (const auto& [name, value] : sorted) key += name + "=" + value + "\x1f";
  return key;
}

}  // namespace exposition_detail

// Every problem of `text`; empty when it is well formed. Fills *samples
// (when given) with every sample parsed.
inline std::vector<std::string> CheckExposition(const std::string& text, std::vector<ParsedSample>* samples = nullptr) {
  using namespace exposition_detail;
  std::vector<std::string> problems;
  if (!text.empty() && text.back() != '\n') problems.push_back("text does not end with a newline");

  struct FamilyInfo {
    std::string type;
    bool help = false;
    bool has_samples = false;
    bool group_closed = false;
  };
  struct HistogramSeries {
    std::vector<std::pair<double, double>> buckets;  // le, cumulative count
    std::optional<double> sum;
    std::optional<double> count;
    size_t line = 0;
    std::string family;
  };
  std::map<std::string, FamilyInfo> families;
  std::set<std::string> series_seen;
  std::map<std::string, HistogramSeries> histograms;  // family + label key without le
  std::string current_family;                         // of the last sample

  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string where = "line " + std::to_string(line_no) + " '" + std::string(line.substr(0, 120)) + "': ";
    if (line.empty()) {
      problems.push_back(where + "empty line");
      continue;
    }
    if (line[0] == '#') {
      const bool help = line.starts_with("# HELP ");
      const bool type = line.starts_with("# TYPE ");
      if (!help && !type) {
        problems.push_back(where + "a comment other than HELP or TYPE");
        continue;
      }
      std::string_view rest = line.substr(7);
      const size_t space = rest.find(' ');
      const std::string name(rest.substr(0, space));
      if (!ValidMetricName(name)) {
        problems.push_back(where + "invalid metric name");
        continue;
      }
      if (space == std::string_view::npos) {
        problems.push_back(where + (help ? "HELP without text" : "TYPE without a type"));
        continue;
      }
      const std::string_view body = rest.substr(space + 1);
      FamilyInfo& family = families[name];
      if (family.has_samples) problems.push_back(where + "HELP/TYPE after the family's samples");
      if (help) {
        if (family.help) problems.push_back(where + "second HELP for " + name);
        family.help = true;
        for (size_t i = 0; i < body.size(); ++i) {
          if (body[i] == '\\' && (i + 1 >= body.size() || (body[i + 1] != '\\' && body[i + 1] != 'n'))) {
            problems.push_back(where + "invalid escape in HELP");
          }
          if (body[i] == '\\') ++i;
        }
      } else {
        if (!family.type.empty()) problems.push_back(where + "second TYPE for " + name);
        if (body != "counter" && body != "gauge" && body != "histogram" && body != "summary" && body != "untyped") {
          problems.push_back(where + "unknown type '" + std::string(body) + "'");
        }
        family.type = std::string(body);
      }
      continue;
    }
    ParsedSample sample;
    if (std::string why = ParseSampleLine(line, &sample); !why.empty()) {
      problems.push_back(where + why);
      continue;
    }
    // Which announced family the sample belongs to.
    std::string family_name = sample.name;
    std::string suffix;
    if (!families.count(family_name) || families[family_name].type.empty()) {
      for (const char* s : {"_bucket", "_sum", "_count"}) {
        const std::string_view sv(s);
        if (sample.name.size() > sv.size() && std::string_view(sample.name).ends_with(sv)) {
          std::string base = sample.name.substr(0, sample.name.size() - sv.size());
          auto it = families.find(base);
          if (it != families.end() && it->second.type == "histogram") {
            family_name = base;
            suffix = s;
          }
        }
      }
    }
    auto family_it = families.find(family_name);
    if (family_it == families.end() || family_it->second.type.empty()) {
      problems.push_back(where + "sample without a TYPE line before it");
      continue;
    }
    FamilyInfo& family = family_it->second;
    if (!family.help) problems.push_back(where + "family without a HELP line before its samples");
    if (family.type == "histogram" && suffix.empty()) {
      problems.push_back(where + "histogram sample that is not _bucket, _sum or _count");
      continue;
    }
    if (current_family != family_name) {
      if (!current_family.empty()) families[current_family].group_closed = true;
      if (family.group_closed) problems.push_back(where + "samples of " + family_name + " are not one group");
      current_family = family_name;
    }
    family.has_samples = true;
    const bool is_bucket = suffix == "_bucket";
    bool has_le = false;
    for (const auto& [name, value] : sample.labels) has_le = has_le || name == "le";
    if (has_le != is_bucket) problems.push_back(where + (is_bucket ? "bucket without le" : "le on a non-bucket"));
    const std::string series = sample.name + "\x1e" + LabelKey(sample.labels, false);
    if (!series_seen.insert(series).second) problems.push_back(where + "series repeated");
    const bool is_count = family.type == "counter" || (family.type == "histogram" && suffix != "_sum");
    if (is_count ? !(sample.value >= 0) : (suffix == "_sum" && std::isnan(sample.value))) {
      problems.push_back(where + "negative or NaN count");
    }
    if (family.type == "histogram") {
      HistogramSeries& h = histograms[family_name + "\x1e" + LabelKey(sample.labels, true)];
      h.family = family_name;
      h.line = line_no;
      if (is_bucket) {
        std::string le;
        for (const auto& [name, value] : sample.labels) {
          if (name == "le") le = value;
        }
        std::optional<double> bound = ParseValue(le);
        if (!bound || std::isnan(*bound)) {
          problems.push_back(where + "le is not a number");
        } else {
          if (h.sum || h.count) problems.push_back(where + "bucket after _sum/_count");
          h.buckets.emplace_back(*bound, sample.value);
        }
      } else if (suffix == "_sum") {
        h.sum = sample.value;
      } else {
        h.count = sample.value;
      }
    }
    if (samples != nullptr) samples->push_back(std::move(sample));
  }
  for (const auto& [name, family] : families) {
    if (family.type.empty()) problems.push_back(name + ": HELP without TYPE");
    if (!family.help) problems.push_back(name + ": TYPE without HELP");
  }
  for (const auto& [key, h] : histograms) {
    const std::string where = h.family + " (series ending line " + std::to_string(h.line) + "): ";
    if (h.buckets.empty() || !std::isinf(h.buckets.back().first) || h.buckets.back().first < 0) {
      problems.push_back(where + "no le=\"+Inf\" bucket last");
    }
    for (size_t i = 1; i < h.buckets.size(); ++i) {
      if (!(h.buckets[i - 1].first < h.buckets[i].first)) problems.push_back(where + "le not increasing");
      if (h.buckets[i].second < h.buckets[i - 1].second) problems.push_back(where + "bucket counts decrease");
    }
    if (!h.sum) problems.push_back(where + "no _sum");
    if (!h.count) problems.push_back(where + "no _count");
    if (h.count && !h.buckets.empty() && h.buckets.back().second != *h.count) {
      problems.push_back(where + "+Inf bucket differs from _count");
    }
  }
  return problems;
}

// The value of the sample `name` with exactly these labels (any order), if present.
inline std::optional<double> SampleValue(const std::vector<ParsedSample>& samples, const std::string& name,
                                         std::vector<std::pair<std::string, std::string>> labels = {}) {
  const std::string want = exposition_detail::LabelKey(labels, false);
  for (const ParsedSample& sample : samples) {
    if (sample.name == name && exposition_detail::LabelKey(sample.labels, false) == want) return sample.value;
  }
  return std::nullopt;
}

}  // namespace kvpeer::daemon::testing
