// Human-readable views of the control API's `status` response.
//
// Written for a terminal: a compact header (node id, listen address,
// version, uptime), then tables of peers and engines and the counters.
// Fields that are missing or of an unexpected type print as "-" rather than
// failing, so a newer daemon with extra or renamed fields still shows
// something useful; `--json` is the exact, scriptable form.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <ostream>
#include <string>

namespace kvpeer::cli {

// The whole status view.
void PrintStatus(const boost::json::object& status, std::ostream& out);

// Only the peers table (the `peers` command).
void PrintPeers(const boost::json::object& status, std::ostream& out);

// "512 B", "1.5 KiB", "3.0 GiB".
std::string FormatBytes(uint64_t bytes);

// "45s", "3m 07s", "2h 03m 07s", "4d 02h 03m".
std::string FormatDuration(uint64_t seconds);

}  // namespace kvpeer::cli
