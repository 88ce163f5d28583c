// The baselines: 64-byte TCP and Unix round trips (back to back and
// paced) and memcpy, what the daemons' figures are compared against.
#include "bench/baselines.h"
#include "bench/parts.h"

namespace kvpeer::bench {

Baselines RunBaselines(const Sizes& sizes, Report& report) {
  Baselines b;
  Progress("baseline: 64-byte round trips, memcpy");
  b.tcp_rtt = TcpRoundTrips(sizes.rtt_count, sizes.rtt_count / 10);
  b.unix_rtt = UnixRoundTrips(sizes.rtt_count, sizes.rtt_count / 10, &b.unix_echo_cpu_us);
  b.tcp_rtt_paced = TcpRoundTrips(sizes.lookup_count, sizes.lookup_count / 10, kPaceUs);
  b.unix_rtt_paced = UnixRoundTrips(sizes.lookup_count, sizes.lookup_count / 10, nullptr, kPaceUs);
  b.memcpy_gbps = MemcpyGBps(kMiB, sizes.memcpy_total, sizes.region_bytes);

  report.Add(Fig("tcp_rtt_p50_us", "baseline: TCP 64 B round trip p50", "us", Percentile(b.tcp_rtt, 0.5)));
  report.Add(Fig("tcp_rtt_p99_us", "baseline: TCP 64 B round trip p99", "us", Percentile(b.tcp_rtt, 0.99)));
  report.Add(Fig("tcp_rtt_paced_p50_us", "baseline: TCP 64 B round trip p50, 200 us apart", "us",
                 Percentile(b.tcp_rtt_paced, 0.5)));
  report.Add(Fig("unix_rtt_p50_us", "baseline: Unix 64 B round trip p50", "us", Percentile(b.unix_rtt, 0.5)));
  report.Add(Fig("unix_rtt_p99_us", "baseline: Unix 64 B round trip p99", "us", Percentile(b.unix_rtt, 0.99)));
  report.Add(Fig("unix_rtt_paced_p50_us", "baseline: Unix 64 B round trip p50, 200 us apart", "us",
                 Percentile(b.unix_rtt_paced, 0.5)));
  report.Add(Fig("unix_echo_cpu_us", "baseline: Unix echo thread CPU per round trip", "us", b.unix_echo_cpu_us));
  report.Add(Fig("memcpy_GBps", "baseline: memcpy 1 MiB, 1 thread", "GB/s", b.memcpy_gbps));
  report.details()["tcp_rtt_us"] = Summary(b.tcp_rtt);
  report.details()["unix_rtt_us"] = Summary(b.unix_rtt);
  report.details()["tcp_rtt_paced_us"] = Summary(b.tcp_rtt_paced);
  report.details()["unix_rtt_paced_us"] = Summary(b.unix_rtt_paced);
  return b;
}

}  // namespace kvpeer::bench
