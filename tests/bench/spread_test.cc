// The median and spread math of the bench (bench/spread.h).
#include "bench/spread.h"

#include <catch2/catch.hpp>

namespace kvpeer::bench {
namespace {

TEST_CASE("SpreadOf: five samples in any order give the middle one and the 2nd and 4th as quartiles") {
  const Spread s = SpreadOf({3.0, 9.0, 1.0, 7.0, 5.0});
  CHECK(s.count == 5);
  CHECK(s.min == 1.0);
  CHECK(s.q1 == 3.0);
  CHECK(s.median == 5.0);
  CHECK(s.q3 == 7.0);
  CHECK(s.max == 9.0);
  CHECK(s.Iqr() == 4.0);
}

TEST_CASE("SpreadOf: an even count interpolates between the closest ranks") {
  const Spread s = SpreadOf({4.0, 1.0, 3.0, 2.0});
  CHECK(s.median == Approx(2.5));
  CHECK(s.q1 == Approx(1.75));  // position 0.75 between 1 and 2
  CHECK(s.q3 == Approx(3.25));
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);
}

TEST_CASE("SpreadOf: one sample is its own median and spread; none gives zeros") {
  const Spread one = SpreadOf({2.5});
  CHECK(one.count == 1);
  CHECK(one.min == 2.5);
  CHECK(one.median == 2.5);
  CHECK(one.max == 2.5);
  CHECK(one.Iqr() == 0.0);
  const Spread none = SpreadOf({});
  CHECK(none.count == 0);
  CHECK(none.median == 0.0);
}

TEST_CASE("InterpolatedQuantile: the ends are min and max, q is clamped") {
  const std::vector<double> samples = {10.0, 30.0, 20.0};
  CHECK(InterpolatedQuantile(samples, 0.0) == 10.0);
  CHECK(InterpolatedQuantile(samples, 1.0) == 30.0);
  CHECK(InterpolatedQuantile(samples, 0.5) == 20.0);
  CHECK(InterpolatedQuantile(samples, 0.25) == Approx(15.0));
  CHECK(InterpolatedQuantile(samples, 2.0) == 30.0);
  CHECK(InterpolatedQuantile({}, 0.5) == 0.0);
}

TEST_CASE("PairRatios: one ratio per pair, pairs with a zero denominator left out") {
  const std::vector<double> ratios = PairRatios({2.0, 3.0, 4.0, 9.0}, {4.0, 0.0, 2.0});
  REQUIRE(ratios.size() == 2);
  CHECK(ratios[0] == 0.5);
  CHECK(ratios[1] == 2.0);
}

}  // namespace
}  // namespace kvpeer::bench
