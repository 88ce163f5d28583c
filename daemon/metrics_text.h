// FormatMetrics: the `metrics` op's text, in the Prometheus text exposition
// format (version 0.0.4).
//
// Every family has HELP and TYPE lines before its samples; counters end in
// _total. Control-side counters become kvpeer_<name>_total, except the
// errors_<code> ones, which form kvpeer_control_errors_total{code="..."}.
// Per-peer values come from the peers' status objects.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

#include <boost/json/array.hpp>

#include "daemon/counters.h"

namespace kvpeer::daemon {

struct MetricsInput {
  int64_t uptime_s = 0;
  size_t engines = 0;
  size_t control_connections = 0;
  boost::json::array peers;  // as PeerService::PeersStatus()
  const Counters* counters = nullptr;
};

std::string FormatMetrics(const MetricsInput& input);

}  // namespace kvpeer::daemon
