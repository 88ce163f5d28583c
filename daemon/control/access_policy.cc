#include "daemon/control/access_policy.h"

#include <algorithm>

#include <boost/json/array.hpp>

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

bool Listed(const std::vector<uint32_t>& ids, uint32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::string List(const std::vector<uint32_t>& ids) {
  std::string text = "[";
  for (size_t i = 0; i < ids.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ids[i]);
  return text + "]";
}

}  // namespace

bool AccessPolicy::Holds(const PeerCredentials& caller, Privilege privilege) const {
  if (privilege == Privilege::kNone) return true;
  if (caller.uid == 0 || caller.uid == daemon_uid_) return true;
  const GrantedIds& granted = Granted(privilege);
  if (granted.uids.empty() && granted.gids.empty()) return true;  // not configured: everyone's
  if (Listed(granted.uids, caller.uid) || Listed(granted.gids, caller.gid)) return true;
  return std::any_of(caller.groups.begin(), caller.groups.end(),
                     [&](uint32_t group) { return Listed(granted.gids, group); });
}

Status AccessPolicy::Check(const PeerCredentials& caller, Privilege privilege, std::string_view what) const {
  if (Holds(caller, privilege)) return Status::Ok();
  const bool op = privilege == Privilege::kOperator;
  const std::string setting = op ? "operator" : "publisher";
  const GrantedIds& granted = Granted(privilege);
  std::string allowed = daemon_uid_ == 0 ? "root" : "root, the daemon's uid " + std::to_string(daemon_uid_);
  if (!granted.uids.empty()) allowed += ", uids " + List(granted.uids);
  if (!granted.gids.empty()) allowed += ", members of gids " + List(granted.gids);
  return Status::Invalid(std::string(what) + " is refused: " + DescribeCaller(caller) + " is not " +
                         (op ? "an operator" : "a publisher") + " of this node (allowed: " + allowed +
                         "; granted by the settings " + setting + "-uid and " + setting + "-gid)");
}

json::object AccessPolicy::ToJson() const {
  auto side = [this](const GrantedIds& granted) {
    std::vector<uint32_t> uids{0};
    for (uint32_t uid : granted.uids) {
      if (!Listed(uids, daemon_uid_)) uids.push_back(daemon_uid_);
      if (!Listed(uids, uid)) uids.push_back(uid);
    }
    if (!Listed(uids, daemon_uid_)) uids.push_back(daemon_uid_);
    const bool anyone = granted.uids.empty() && granted.gids.empty();
    return json::object{{"anyone", anyone},
                        {"uids", anyone ? json::array() : json::array(uids.begin(), uids.end())},
                        {"gids", json::array(granted.gids.begin(), granted.gids.end())}};
  };
  return json::object{{"publishers", side(publishers_)}, {"operators", side(operators_)}};
}

std::string DescribeCaller(const PeerCredentials& caller) {
  std::string text = "uid " + std::to_string(caller.uid) + " (gid " + std::to_string(caller.gid);
  if (!caller.groups.empty()) text += ", groups " + List(caller.groups);
  return text + ")";
}

}  // namespace kvpeer::daemon
