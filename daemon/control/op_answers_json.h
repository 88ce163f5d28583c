// The response fields of the ops whose answers are lists
// (docs/control-api.md, "3. Engine session": `lookup`'s `results`,
// `unpublish`'s `released` and `pinned`, `poll`'s report; "4. Operator
// operations": `status`'s `engines`). The engine session and the registry
// answer with plain values; these put them into the response object, in
// the response's own memory (the connection's parse memory), so moving them
// in copies nothing.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "daemon/control/engine_jobs.h"
#include "daemon/control/engine_registry.h"
#include "daemon/node/published_blocks.h"
#include "session/client_role.h"

namespace kvpeer::daemon {

// `results`: "hit", "miss" or "retry" per key.
void AddProbeAnswers(const std::vector<session::ProbeAnswer>& answers, boost::json::object* response);
// `released` and `pinned`.
void AddUnpublishResult(const UnpublishResult& result, boost::json::object* response);
// `results`, `failed_requests` and `released`.
void AddPollReport(const PollReport& report, boost::json::object* response);
// `status`'s `engines`: one object per engine session.
boost::json::array EnginesStatusJson(const std::vector<EngineRegistry::EngineStatus>& engines);

}  // namespace kvpeer::daemon
