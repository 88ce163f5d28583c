// SendLowWater on a real TCP socket: bounded once a lookup or its answer is
// queued, kept while such frames keep coming, released by data frames only
// after kQuietTime without them (docs/performance.md, "Lookups during bulk").
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "daemon/peer/send_low_water.h"

namespace kvpeer::daemon {
namespace {

int NotSentLowWater(int fd) {
  int value = -1;
  socklen_t length = sizeof(value);
  REQUIRE(::getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, &length) == 0);
  return value;
}

TEST_CASE("SendLowWater bounds unsent bytes while lookups go out, and only then") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  SendLowWater low_water;
  const auto t0 = SendLowWater::Clock::now();
  CHECK(NotSentLowWater(fd) == 0);  // the kernel's default until a lookup goes out

  low_water.OnDataFrame(fd, t0);
  CHECK_FALSE(low_water.bounded());
  CHECK(NotSentLowWater(fd) == 0);

  low_water.OnLatencyFrame(fd, t0);
  CHECK(low_water.bounded());
  CHECK(NotSentLowWater(fd) == SendLowWater::kBoundBytes);

  // Data within the quiet time keeps the bound; a later lookup restarts it.
  low_water.OnDataFrame(fd, t0 + SendLowWater::kQuietTime / 2);
  CHECK(NotSentLowWater(fd) == SendLowWater::kBoundBytes);
  low_water.OnLatencyFrame(fd, t0 + SendLowWater::kQuietTime);
  low_water.OnDataFrame(fd, t0 + SendLowWater::kQuietTime * 3 / 2);
  CHECK(NotSentLowWater(fd) == SendLowWater::kBoundBytes);

  // Quiet for longer than kQuietTime: the next data frame lifts the bound.
  low_water.OnDataFrame(fd, t0 + SendLowWater::kQuietTime * 5 / 2);
  CHECK_FALSE(low_water.bounded());
  CHECK(NotSentLowWater(fd) == 0);
  ::close(fd);
}

}  // namespace
}  // namespace kvpeer::daemon
