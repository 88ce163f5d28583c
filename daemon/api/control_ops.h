// The control API's op table (docs/control-api.md, "Engine session" and
// "Operator operations"), modelled on Redis's command table: one row per op
// says whether the op needs an engine session, whether it starts new work
// (refused once the daemon drains, "Shutdown") and which handler answers
// it. Dispatch, the unknown_op message, the shutdown refusals and the
// control fuzz target all read this one table, so adding an op is one row
// and one handler.
//
// Handlers are pointers to the pure virtual methods of ControlOpHandlers,
// which ControlServer implements. A pointer to a virtual method is an offset
// into the vtable, not an address, so this file links without the rest of
// the daemon: the fuzz target (fuzz/fuzz_control_request.cc) takes its op
// names from the table without the event loop.
//
// Thread-safety: the table is immutable; the functions are pure.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "daemon/api/api_error.h"

namespace kvpeer::daemon {

class ControlConnection;
class EngineSession;
struct ControlLine;

// One request being answered. Lives in the dispatching coroutine's frame,
// which outlives the handler's.
struct OpCall {
  ControlConnection& connection;
  const boost::json::object& request;
  ControlLine& line;  // its descriptors (SCM_RIGHTS) may be taken
  // The connection's engine session when the op needs one (set by then),
  // else whatever the connection has (null before hello). Shared so that a
  // waiting poll keeps its session alive.
  std::shared_ptr<EngineSession> engine;
  boost::json::object* response;  // the op's fields on success
  // Set by an op answered at once (a kWithWaitMs op whose request asks to
  // wait) when the answer is not there yet: the op's awaitable handler
  // then answers the request anew, and *response is not used.
  bool must_wait = false;
};

// What answers the ops; one method per row of the table. Most ops answer at
// once (a plain call, no coroutine frame); the ops that may wait (connect,
// and lookup and poll with a wait_ms) also have an awaitable handler, used
// for connect always and for lookup and poll only when the request asks to
// wait (the row's WaitRule) and the answer is not there yet (must_wait).
class ControlOpHandlers {
 public:
  using OpAnswer = Status;
  using OpWait = boost::asio::awaitable<Status>;
  virtual ~ControlOpHandlers() = default;
  // Operator ops ("Operator operations").
  virtual OpAnswer NodeStatus(OpCall& call) = 0;  // the "status" op
  virtual OpAnswer Metrics(OpCall& call) = 0;
  virtual OpWait Connect(OpCall& call) = 0;
  virtual OpAnswer Disconnect(OpCall& call) = 0;
  // Engine ops ("Engine session").
  virtual OpAnswer Hello(OpCall& call) = 0;
  virtual OpAnswer RegisterRegion(OpCall& call) = 0;
  virtual OpAnswer Publish(OpCall& call) = 0;
  virtual OpWait PublishSealed(OpCall& call) = 0;  // with seal: true
  virtual OpAnswer Unpublish(OpCall& call) = 0;
  virtual OpAnswer Lookup(OpCall& call) = 0;       // without wait_ms
  virtual OpWait LookupWaiting(OpCall& call) = 0;  // with wait_ms > 0
  virtual OpAnswer Flush(OpCall& call) = 0;
  virtual OpAnswer Load(OpCall& call) = 0;
  virtual OpAnswer Store(OpCall& call) = 0;
  virtual OpWait StoreSealed(OpCall& call) = 0;  // with seal: true
  virtual OpAnswer Finish(OpCall& call) = 0;
  virtual OpAnswer Poll(OpCall& call) = 0;       // without wait_ms
  virtual OpWait PollWaiting(OpCall& call) = 0;  // with wait_ms > 0
};

// When a request of an op goes to the op's awaitable handler.
enum class WaitRule {
  kNever,
  kAlways,
  // When the request has an integer `wait_ms` above 0 (any other value is
  // checked, and refused, by the handler that answers at once) and the
  // handler that answers at once finds nothing to answer yet.
  kWithWaitMs,
  // When the request has `seal: true` (a sealed publish or store hashes its
  // slots off the event loop): the awaitable handler alone answers it.
  kWithSeal,
};

// Who may make a request of an op besides root and the daemon's uid
// (daemon/control/access_policy.h; docs/security.md, "Who may publish and
// operate").
enum class Privilege {
  kNone,       // any socket user
  kPublisher,  // publish, store (and fixing the model settings by hello)
  kOperator,   // connect, disconnect: they change the node's peer sessions
};

struct ControlOp {
  std::string_view name;
  // Answered only after a hello on the same connection (bad_request before).
  bool needs_engine;
  // Starts new work: answered shutting_down once the daemon drains.
  bool is_new_work;
  WaitRule waits;
  Privilege privilege;
  ControlOpHandlers::OpAnswer (ControlOpHandlers::*handler)(OpCall& call);     // null when waits is kAlways
  ControlOpHandlers::OpWait (ControlOpHandlers::*wait_handler)(OpCall& call);  // null when waits is kNever
};

// Whether `request` of `op` may go to the op's awaitable handler.
bool MayWait(const ControlOp& op, const boost::json::object& request);

// Every op of the API, in the order the unknown_op message lists them.
std::span<const ControlOp> ControlOps();

// The row of `name`; null for an op outside the API.
const ControlOp* FindControlOp(std::string_view name);

// The unknown_op error for `name`, listing every known op.
Status UnknownOp(std::string_view name);

// Whether `op` may run now: shutting_down for new work while the daemon
// drains (checked first: a drain refuses a hello-less store the same way),
// then bad_request for an engine op on a connection without hello.
Status CheckOpAllowed(const ControlOp& op, bool shutting_down, bool has_engine);

}  // namespace kvpeer::daemon
