// AccessPolicy: who may do what over the control socket (docs/security.md,
// "Who may publish and operate").
//
// Every socket user may read `status` and `metrics` and run an engine that
// loads. Two privileges are configured:
//
//   publisher  `publish` and `store` (what a remote consumer loads is what a
//              publisher put there), and fixing the node's model settings
//              by the first `hello` when the config leaves them unset;
//              --publisher-uid / --publisher-gid.
//   operator   `connect` and `disconnect` (they change the node's peer
//              sessions, and with them other engines' work);
//              --operator-uid / --operator-gid.
//
// A privilege with no uid and no gid configured is everyone's: control-api.md
// (normative) lets every admitted socket user publish and operate, so that
// stays the default (docs/security.md, "Who may publish and operate": the
// packaged config and units configure both). Once one id is configured,
// only root, the daemon's own uid and the listed ids hold it. A caller is listed when
// its uid is, or its primary gid or one of its supplementary groups is
// (PeerCredentials: SO_PEERCRED and SO_PEERGROUPS, read by the kernel when
// the connection was made, so a process cannot claim groups it did not
// have then). A refusal is bad_request naming the setting: the request is
// well-formed but not this caller's to make, the code the spec already
// uses for a region file the caller does not own.
//
// Thread-safety: a plain value; its methods are const.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "base/status.h"
#include "daemon/api/control_ops.h"
#include "daemon/control/engine_registry.h"

namespace kvpeer::daemon {

// Ids granted a privilege besides root and the daemon's uid.
struct GrantedIds {
  std::vector<uint32_t> uids;
  std::vector<uint32_t> gids;
};

class AccessPolicy {
 public:
  // Nothing configured: everyone holds both (the spec's behaviour).
  explicit AccessPolicy(uint32_t daemon_uid = 0) : daemon_uid_(daemon_uid) {}
  AccessPolicy(uint32_t daemon_uid, GrantedIds publishers, GrantedIds operators)
      : daemon_uid_(daemon_uid), publishers_(std::move(publishers)), operators_(std::move(operators)) {}

  bool Holds(const PeerCredentials& caller, Privilege privilege) const;
  // Ok when the caller holds `privilege`; otherwise bad_request saying that
  // `what` ("op 'publish'") is refused, who the caller is, and which
  // settings grant it.
  Status Check(const PeerCredentials& caller, Privilege privilege, std::string_view what) const;

  // For `status`: {"publishers": {"anyone": bool, "uids": [...], "gids":
  // [...]}, "operators": {...}}; when not anyone, root and the daemon's uid
  // are included in "uids".
  boost::json::object ToJson() const;

 private:
  const GrantedIds& Granted(Privilege privilege) const {
    return privilege == Privilege::kOperator ? operators_ : publishers_;
  }

  uint32_t daemon_uid_;
  GrantedIds publishers_;
  GrantedIds operators_;
};

// "uid U gid G groups [a, b]" for log lines and refusals.
std::string DescribeCaller(const PeerCredentials& caller);

}  // namespace kvpeer::daemon
