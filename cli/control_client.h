// A one-shot client of kvpeerd's control socket (control-api.md section 1).
//
// Exchange() connects to the Unix socket, sends one NDJSON request line and
// reads one response line. It distinguishes "the daemon could not be
// reached or did not answer" (an Unreachable message written for the
// operator: which path, what failed, what to check) from a parsed answer;
// whether that answer is ok:true is the caller's concern.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <string>

#include "base/status_or.h"

namespace kvpeer::cli {

// Sends `request` (one JSON object, serialized on one line) over the socket
// at `socket_path` and reads the answer line: the daemon's answer, or
// (kUnavailable) why it could not be had, e.g. "cannot reach kvpeerd at PATH:
// ... (is the daemon running?)". `timeout` bounds the whole exchange
// (connect, send and the full answer), not each read, so a daemon dribbling
// its answer cannot stretch it; on expiry the message starts "kvpeerd did not
// answer within S s".
StatusOr<boost::json::object> Exchange(const std::string& socket_path, const boost::json::object& request,
                                       std::chrono::seconds timeout);

}  // namespace kvpeer::cli
