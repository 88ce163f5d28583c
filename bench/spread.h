// The median and spread of a figure measured several times (the interleaved
// bulk rounds, the repeated request shapes): one number alone hides how much
// a shared machine moved it.
//
// Quartiles are interpolated linearly between the closest ranks (numpy's
// default, "type 7"), so the median of an even count is the mean of the two
// middle samples. The spread is reported as min, max and the interquartile
// range (q3 - q1); with five samples q1 and q3 are the 2nd and 4th smallest.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <vector>

namespace kvpeer::bench {

struct Spread {
  size_t count = 0;
  double min = 0;
  double q1 = 0;
  double median = 0;
  double q3 = 0;
  double max = 0;
  double Iqr() const { return q3 - q1; }
};

// Linearly interpolated quantile (q in 0..1) of unsorted samples; 0 for none.
double InterpolatedQuantile(std::vector<double> samples, double q);

// All zero for no samples.
Spread SpreadOf(const std::vector<double>& samples);

// Element-wise numerator[i] / denominator[i] (pairs whose denominator is 0
// are left out): the ratio of each interleaved pair, whose median is steadier
// than the ratio of two medians because both members of a pair saw the
// machine in the same state.
std::vector<double> PairRatios(const std::vector<double>& numerator, const std::vector<double>& denominator);

}  // namespace kvpeer::bench
