// What this machine can do without kvpeer, measured in the same run:
// plain TCP loopback throughput over one connection with blocking
// send/recv, 64-byte round trips over TCP and a Unix socket, and a
// single-thread memcpy. Each runs on two threads of this process (one for
// each end), so the figures include the same wake-ups and context switches
// that the daemons pay.
//
// Thread-safety: each function runs its own threads and returns when done.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/round_length.h"

namespace kvpeer::bench {

struct RawTransfer {
  uint64_t bytes = 0;
  double seconds = 0;  // first byte sent to last byte received
  int64_t sender_cpu_ns = 0;
  int64_t receiver_cpu_ns = 0;
  int64_t context_switches = 0;  // voluntary, both threads (each is a sleep and a wake-up)
  double GBps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
  double CpuSecondsPerGB() const {
    return static_cast<double>(sender_cpu_ns + receiver_cpu_ns) / 1e9 / (static_cast<double>(bytes) / 1e9);
  }
};

// Streams blocks over one loopback TCP connection until `length` is
// reached (the sender decides, then half-closes; the receiver reads to the
// end), send() and recv(MSG_WAITALL) of `block` bytes each, from and into
// buffers of `buffer_bytes` used round-robin (as large as the daemons'
// regions, so both sides touch the same amount of memory). TCP_NODELAY as
// the daemons.
RawTransfer RawTcpThroughput(uint64_t block, const RoundLength& length, uint64_t buffer_bytes);

// Round trips of a 64-byte message between two threads: over loopback TCP
// (TCP_NODELAY) or over a Unix stream socket. Returns one sample (µs) per
// round trip, after `warmup` unrecorded ones; `pace_us` of sleep between
// round trips lets both ends go idle as a daemon between requests does.
std::vector<double> TcpRoundTrips(int count, int warmup, int64_t pace_us = 0);
// `echo_cpu_us_per_trip`, when given, gets the echo thread's CPU time per
// round trip: what a blocking server spends per request on this machine,
// wake-ups included (the floor of the daemon's CPU per control op).
std::vector<double> UnixRoundTrips(int count, int warmup, double* echo_cpu_us_per_trip = nullptr, int64_t pace_us = 0);

// Single-thread memcpy of `chunk`-byte pieces between two buffers of
// `buffer_bytes` (beyond the caches) until `total` bytes are copied; GB/s.
double MemcpyGBps(uint64_t chunk, uint64_t total, uint64_t buffer_bytes);

}  // namespace kvpeer::bench
