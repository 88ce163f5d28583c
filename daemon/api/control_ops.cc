#include "daemon/api/control_ops.h"

#include <algorithm>
#include <array>

#include "base/utf8.h"
#include "daemon/api/json_request.h"

namespace kvpeer::daemon {
namespace {

using H = ControlOpHandlers;

// docs/control-api.md: "Operator operations" need no hello; "Engine session"
// ops do, except hello itself; "Shutdown" lists the new work.
constexpr std::array kOps = {
    //         name         needs_engine  is_new_work  handler
    ControlOp{"status",          false,       false,       &H::NodeStatus},
    ControlOp{"metrics",         false,       false,       &H::Metrics},
    ControlOp{"connect",         false,       true,        &H::Connect},
    ControlOp{"disconnect",      false,       false,       &H::Disconnect},
    ControlOp{"hello",           false,       true,        &H::Hello},
    ControlOp{"register_region", true,        true,        &H::RegisterRegion},
    ControlOp{"publish",         true,        true,        &H::Publish},
    ControlOp{"unpublish",       true,        false,       &H::Unpublish},
    ControlOp{"lookup",          true,        true,        &H::Lookup},
    ControlOp{"flush",           true,        false,       &H::Flush},
    ControlOp{"load",            true,        true,        &H::Load},
    ControlOp{"store",           true,        true,        &H::Store},
    ControlOp{"finish",          true,        false,       &H::Finish},
    ControlOp{"poll",            true,        false,       &H::Poll},
};

// An op quoted in a message is cut short: the request may hold megabytes.
constexpr size_t kMaxQuotedOpBytes = 64;

std::string KnownOps() {
  std::string list;
  for (const ControlOp& op : kOps) list += (list.empty() ? "" : ", ") + std::string(op.name);
  return list;
}

}  // namespace

std::span<const ControlOp> ControlOps() { return kOps; }

const ControlOp* FindControlOp(std::string_view name) {
  auto found = std::find_if(kOps.begin(), kOps.end(), [name](const ControlOp& op) { return op.name == name; });
  return found != kOps.end() ? &*found : nullptr;
}

Status UnknownOp(std::string_view name) {
  return Status::UnknownOp("op '" + Utf8Prefix(name, kMaxQuotedOpBytes) + "' is not known; ops: " + KnownOps());
}

Status CheckOpAllowed(const ControlOp& op, bool shutting_down, bool has_engine) {
  const std::string name(op.name);
  if (shutting_down && op.is_new_work) {
    return Status::ShuttingDown("the daemon is shutting down; op '" + name + "' is refused");
  }
  if (op.needs_engine && !has_engine) {
    return Status::Invalid("op '" + name + "' needs an engine session: send hello first");
  }
  return Status::Ok();
}

}  // namespace kvpeer::daemon
