#include "bench/report.h"

#include <cmath>
#include <cstdio>

#include <boost/json/array.hpp>

namespace kvpeer::bench {

namespace json = boost::json;

namespace {

std::string Number(double value) {
  char text[64];
  const double magnitude = std::fabs(value);
  if (magnitude != 0 && (magnitude >= 1e6 || magnitude < 0.01)) {
    std::snprintf(text, sizeof(text), "%.3g", value);
  } else if (magnitude >= 100) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.3g", value);
  }
  return text;
}

std::string Pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

// "min..max, IQR q1..q3, n=count" in the figure's unit.
std::string SpreadText(const Spread& s) {
  return Number(s.min) + ".." + Number(s.max) + ", IQR " + Number(s.q1) + ".." + Number(s.q3) +
         ", n=" + std::to_string(s.count);
}

}  // namespace

Figure Fig(std::string id, std::string name, std::string unit, double value) {
  Figure f;
  f.id = std::move(id);
  f.name = std::move(name);
  f.unit = std::move(unit);
  f.value = value;
  return f;
}

Figure MedianFigure(std::string id, std::string name, std::string unit, const std::vector<double>& samples) {
  const Spread spread = SpreadOf(samples);
  Figure f = Fig(std::move(id), std::move(name), std::move(unit), spread.median);
  f.spread = spread;
  return f;
}

json::object SpreadJson(const Spread& s) {
  return json::object{{"count", s.count}, {"min", s.min}, {"q1", s.q1},    {"median", s.median},
                      {"q3", s.q3},       {"max", s.max}, {"iqr", s.Iqr()}};
}

std::optional<double> Figure::Ratio() const {
  if (!baseline || *baseline == 0) return std::nullopt;
  return value / *baseline;
}

std::optional<bool> Figure::Met() const {
  switch (goal) {
    case Goal::kNone:
      return std::nullopt;
    case Goal::kValueMax:
      return value <= target;
    case Goal::kValueMin:
      return value >= target;
    case Goal::kRatioMin: {
      auto ratio = Ratio();
      return ratio && *ratio >= target;
    }
    case Goal::kRatioMax: {
      auto ratio = Ratio();
      return ratio && *ratio <= target;
    }
  }
  return std::nullopt;
}

std::string Report::Table() const {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"figure", "value", "spread (min..max, IQR)", "baseline", "ratio", "target", "met?"});
  for (const Figure& f : figures_) {
    std::string baseline = f.baseline ? Number(*f.baseline) + " " + f.unit + " (" + f.baseline_name + ")" : "-";
    auto ratio = f.Ratio();
    auto met = f.Met();
    rows.push_back({f.name, Number(f.value) + " " + f.unit, f.spread ? SpreadText(*f.spread) : "-", baseline,
                    ratio ? Number(*ratio) + "x" : "-", f.target_text.empty() ? "-" : f.target_text,
                    met ? (*met ? "yes" : "NO") : "-"});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line = "| ";
    for (size_t i = 0; i < rows[r].size(); ++i) line += Pad(rows[r][i], widths[i]) + " | ";
    line.pop_back();
    out += line + "\n";
    if (r == 0) {
      std::string rule = "|";
      for (size_t width : widths) rule += std::string(width + 2, '-') + "|";
      out += rule + "\n";
    }
  }
  return out;
}

json::object Report::Json(const std::string& mode) const {
  json::array figures;
  size_t with_target = 0, met_count = 0;
  for (const Figure& f : figures_) {
    json::object item;
    item["id"] = f.id;
    item["name"] = f.name;
    item["unit"] = f.unit;
    item["value"] = f.value;
    item["baseline"] = f.baseline ? json::value(*f.baseline) : json::value(nullptr);
    item["baseline_name"] = f.baseline_name;
    auto ratio = f.Ratio();
    item["ratio"] = ratio ? json::value(*ratio) : json::value(nullptr);
    item["target"] = f.target_text.empty() ? json::value(nullptr) : json::value(f.target_text);
    auto met = f.Met();
    item["met"] = met ? json::value(*met) : json::value(nullptr);
    item["spread"] = f.spread ? json::value(SpreadJson(*f.spread)) : json::value(nullptr);
    if (met) {
      ++with_target;
      met_count += *met ? 1 : 0;
    }
    figures.push_back(std::move(item));
  }
  json::object out;
  out["mode"] = mode;
  out["figures"] = std::move(figures);
  out["targets"] = json::object{{"total", with_target}, {"met", met_count}};
  out["details"] = details_;
  return out;
}

}  // namespace kvpeer::bench
