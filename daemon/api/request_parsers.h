// The control requests' parsers: one function per op turns the request
// object (one parsed NDJSON line) into its validated struct
// (control_requests.h). A failure is the API error the daemon answers
// with: bad_request naming the first field that breaks its rule, in the
// order the op's row of docs/control-api.md lists them. Checks that depend
// on state (the region's bound on block ids, the job table, claims) are
// the engine session's. The control server and the control fuzz target
// both call these, so what is fuzzed is what the daemon runs.
//
// Unknown fields are ignored; an optional field that is present must have
// its type. Bounds come from request_limits.h.
//
// Thread-safety: pure functions.
#pragma once

#include <boost/json/object.hpp>

#include "base/status_or.h"
#include "daemon/api/control_requests.h"

namespace kvpeer::daemon {

StatusOr<HelloRequest> ParseHello(const boost::json::object& request);
StatusOr<RegisterRegionRequest> ParseRegisterRegion(const boost::json::object& request);
StatusOr<PublishRequest> ParsePublish(const boost::json::object& request);
StatusOr<UnpublishRequest> ParseUnpublish(const boost::json::object& request);
StatusOr<LookupRequest> ParseLookup(const boost::json::object& request);
StatusOr<LoadRequest> ParseLoad(const boost::json::object& request);
StatusOr<StoreRequest> ParseStore(const boost::json::object& request);
StatusOr<FinishRequest> ParseFinish(const boost::json::object& request);
StatusOr<PollRequest> ParsePoll(const boost::json::object& request);
StatusOr<PeerRequest> ParsePeerRequest(const boost::json::object& request);

}  // namespace kvpeer::daemon
