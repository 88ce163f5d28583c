#include "bench/spread.h"

#include <algorithm>
#include <cmath>

namespace kvpeer::bench {

namespace {

double SortedQuantile(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double weight = position - static_cast<double>(below);
  return sorted[below] + weight * (sorted[above] - sorted[below]);
}

}  // namespace

double InterpolatedQuantile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  return SortedQuantile(samples, std::clamp(q, 0.0, 1.0));
}

Spread SpreadOf(const std::vector<double>& samples) {
  Spread s;
  if (samples.empty()) return s;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  s.count = sorted.size();
  s.min = sorted.front();
  s.q1 = SortedQuantile(sorted, 0.25);
  s.median = SortedQuantile(sorted, 0.5);
  s.q3 = SortedQuantile(sorted, 0.75);
  s.max = sorted.back();
  return s;
}

std::vector<double> PairRatios(const std::vector<double>& numerator, const std::vector<double>& denominator) {
  std::vector<double> ratios;
  const size_t pairs = std::min(numerator.size(), denominator.size());
  for (size_t i = 0; i < pairs; ++i) {
    if (denominator[i] != 0) ratios.push_back(numerator[i] / denominator[i]);
  }
  return ratios;
}

}  // namespace kvpeer::bench
