// How long a load handed back by a superseded connection may still take
// when it is asked again (daemon/peer/peer_directory.h, ResubmitTimeout): the
// bound counts from the load's start, not its first hand-back (issue 25,
// finding 6).
#include <catch2/catch.hpp>
#include <chrono>

#include "daemon/peer/peer_directory.h"

namespace kvpeer::daemon {
namespace {

using std::chrono::seconds;

constexpr unsigned kMax = 4;
const session::TimePoint kStart{};

TEST_CASE("a load asked again gets what is left of one load timeout since its start") {
  auto left = ResubmitTimeout(0, kMax, kStart, kStart + seconds(2), seconds(3));
  REQUIRE(left.has_value());
  CHECK(*left == seconds(1));
  // The second hand-back, later still: less again, never a fresh timeout.
  left = ResubmitTimeout(1, kMax, kStart, kStart + std::chrono::milliseconds(2900), seconds(3));
  REQUIRE(left.has_value());
  CHECK(*left == std::chrono::milliseconds(100));
}

TEST_CASE("a load handed back after one load timeout since its start is not asked again") {
  // Before, the bound ran from the first hand-back: a hand-back at 2.9 s and
  // another at 5.8 s were both asked again with a full 3 s each.
  CHECK_FALSE(ResubmitTimeout(0, kMax, kStart, kStart + seconds(3), seconds(3)).has_value());
  CHECK_FALSE(ResubmitTimeout(1, kMax, kStart, kStart + seconds(6), seconds(3)).has_value());
}

TEST_CASE("a load is asked again at most max_asks times, however early") {
  CHECK(ResubmitTimeout(kMax - 1, kMax, kStart, kStart, seconds(30)).has_value());
  CHECK_FALSE(ResubmitTimeout(kMax, kMax, kStart, kStart, seconds(30)).has_value());
}

}  // namespace
}  // namespace kvpeer::daemon
