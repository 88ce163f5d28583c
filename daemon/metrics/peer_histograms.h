// The bucket bounds of PeerMetrics' histograms: the histograms are built
// and declared in the metrics with the same bounds (Histogram::Merge
// requires it).
#pragma once

#include <chrono>
#include <vector>

namespace kvpeer::daemon::peer_histograms {

// Lookup round trips: 100 us (same rack) to 2.5 s (a stalled peer).
inline const std::vector<double> kLookupRoundTrip = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
// Loads: 1 ms to the 30 s default load timeout and beyond.
inline const std::vector<double> kLoadSeconds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                 0.5,   1,      2.5,   5,    10,    30,   60};
// Transfer sizes: 4 KiB to 4 GiB in powers of 4.
inline const std::vector<double> kLoadBytes = {4096.0,      16384.0,      65536.0,     262144.0,
                                               1048576.0,   4194304.0,    16777216.0,  67108864.0,
                                               268435456.0, 1073741824.0, 4294967296.0};

inline double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace kvpeer::daemon::peer_histograms
