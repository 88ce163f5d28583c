#include "daemon/api/control_ops.h"

#include <algorithm>
#include <array>

#include "base/utf8.h"
#include "daemon/api/json_request.h"

namespace kvpeer::daemon {
namespace {

using H = ControlOpHandlers;

// docs/control-api.md: "Operator operations" need no hello; "Engine session"
// ops do, except hello itself; "Shutdown" lists the new work; docs/security.md,
// "Who may publish and operate", the privileges.
constexpr auto kNever = WaitRule::kNever;
constexpr auto kAlways = WaitRule::kAlways;
constexpr auto kWithWaitMs = WaitRule::kWithWaitMs;
constexpr auto kWithSeal = WaitRule::kWithSeal;
constexpr auto kAny = Privilege::kNone;
constexpr auto kPublisher = Privilege::kPublisher;
constexpr auto kOperator = Privilege::kOperator;
constexpr std::array kOps = {
    //         name              needs_engine  is_new_work  waits        privilege   handler             wait_handler
    ControlOp{"status", false, false, kNever, kAny, &H::NodeStatus, nullptr},
    ControlOp{"metrics", false, false, kNever, kAny, &H::Metrics, nullptr},
    ControlOp{"connect", false, true, kAlways, kOperator, nullptr, &H::Connect},
    ControlOp{"disconnect", false, false, kNever, kOperator, &H::Disconnect, nullptr},
    ControlOp{"hello", false, true, kNever, kAny, &H::Hello, nullptr},
    ControlOp{"register_region", true, true, kNever, kAny, &H::RegisterRegion, nullptr},
    ControlOp{"publish", true, true, kWithSeal, kPublisher, &H::Publish, &H::PublishSealed},
    ControlOp{"unpublish", true, false, kNever, kAny, &H::Unpublish, nullptr},
    ControlOp{"lookup", true, true, kWithWaitMs, kAny, &H::Lookup, &H::LookupWaiting},
    ControlOp{"flush", true, false, kNever, kAny, &H::Flush, nullptr},
    ControlOp{"load", true, true, kNever, kAny, &H::Load, nullptr},
    ControlOp{"store", true, true, kWithSeal, kPublisher, &H::Store, &H::StoreSealed},
    ControlOp{"finish", true, false, kNever, kAny, &H::Finish, nullptr},
    ControlOp{"poll", true, false, kWithWaitMs, kAny, &H::Poll, &H::PollWaiting},
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

bool MayWait(const ControlOp& op, const boost::json::object& request) {
  switch (op.waits) {
    case WaitRule::kNever:
      return false;
    case WaitRule::kAlways:
      return true;
    case WaitRule::kWithWaitMs:
      break;
    case WaitRule::kWithSeal: {
      const boost::json::value* seal = request.if_contains("seal");
      return seal != nullptr && seal->is_bool() && seal->get_bool();
    }
  }
  const boost::json::value* wait_ms = request.if_contains("wait_ms");
  if (wait_ms == nullptr) return false;
  if (const int64_t* value = wait_ms->if_int64()) return *value > 0;
  if (const uint64_t* value = wait_ms->if_uint64()) return *value > 0;
  return false;
}

Status CheckOpAllowed(const ControlOp& op, bool shutting_down, bool has_engine) {
  const std::string_view name = op.name;  // copied only into a refusal
  if (shutting_down && op.is_new_work) {
    return Status::ShuttingDown("the daemon is shutting down; op '" + std::string(name) + "' is refused");
  }
  if (op.needs_engine && !has_engine) {
    return Status::Invalid("op '" + std::string(name) + "' needs an engine session: send hello first");
  }
  return Status::Ok();
}

}  // namespace kvpeer::daemon
