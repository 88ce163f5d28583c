#include "daemon/peer/send_low_water.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace kvpeer::daemon {

void SendLowWater::OnLatencyFrame(int fd, Clock::time_point now) {
  last_latency_frame_ = now;
  if (!bounded_) Set(fd, true);
}

void SendLowWater::OnDataFrame(int fd, Clock::time_point now) {
  if (bounded_ && now - last_latency_frame_ > kQuietTime) Set(fd, false);
}

void SendLowWater::Set(int fd, bool bounded) {
  // 0 puts back the kernel's default (net.ipv4.tcp_notsent_lowat, unbounded
  // unless an operator set it). Best effort: a kernel without the option
  // still works, with longer queues.
  const int bytes = bounded ? kBoundBytes : 0;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof(bytes));
  bounded_ = bounded;
}

}  // namespace kvpeer::daemon
