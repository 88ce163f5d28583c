// Who may publish and operate (daemon/control/access_policy.h): root and the
// daemon's uid always, then listed uids, primary gids and supplementary
// groups; refusals name the caller and the settings.
#include <catch2/catch.hpp>

#include <boost/json/serialize.hpp>

#include "daemon/control/access_policy.h"

namespace kvpeer::daemon {
namespace {

PeerCredentials Caller(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  return PeerCredentials{1234, uid, gid, std::move(groups)};
}

TEST_CASE("by default only root and the daemon's uid publish and operate") {
  const AccessPolicy policy(998);
  for (Privilege privilege : {Privilege::kPublisher, Privilege::kOperator}) {
    CHECK(policy.Holds(Caller(0, 0), privilege));
    CHECK(policy.Holds(Caller(998, 998), privilege));
    CHECK_FALSE(policy.Holds(Caller(1000, 1000, {998, 0}), privilege));
  }
  CHECK(policy.Holds(Caller(1000, 1000), Privilege::kNone));
}

TEST_CASE("a listed uid, primary gid or supplementary group holds the privilege it is listed for") {
  const AccessPolicy policy(998, GrantedIds{{1001}, {2001}}, GrantedIds{{1002}, {2002}});
  CHECK(policy.Holds(Caller(1001, 5), Privilege::kPublisher));
  CHECK(policy.Holds(Caller(7, 2001), Privilege::kPublisher));
  CHECK(policy.Holds(Caller(7, 5, {3, 2001}), Privilege::kPublisher));
  CHECK_FALSE(policy.Holds(Caller(1001, 5), Privilege::kOperator));  // publishing is not operating
  CHECK_FALSE(policy.Holds(Caller(7, 5, {2001}), Privilege::kOperator));
  CHECK(policy.Holds(Caller(7, 5, {2002}), Privilege::kOperator));
  CHECK_FALSE(policy.Holds(Caller(7, 5, {2002}), Privilege::kPublisher));
}

TEST_CASE("a refusal is bad_request naming the op, the caller, who may and the settings") {
  const AccessPolicy policy(998, GrantedIds{{1001}, {2001}}, GrantedIds{});
  const Status refused = policy.Check(Caller(65534, 65534, {65534, 100}), Privilege::kPublisher, "op 'publish'");
  CHECK(refused.code() == Status::Code::kInvalid);
  CHECK(refused.message() ==
        "op 'publish' is refused: uid 65534 (gid 65534, groups [65534, 100]) is not a publisher of this node "
        "(allowed: root, the daemon's uid 998, uids [1001], members of gids [2001]; granted by the settings "
        "publisher-uid and publisher-gid)");
  const Status op = policy.Check(Caller(5, 5), Privilege::kOperator, "op 'disconnect'");
  CHECK(op.message().find("is not an operator") != std::string::npos);
  CHECK(op.message().find("operator-uid and operator-gid") != std::string::npos);
  CHECK(policy.Check(Caller(1001, 5), Privilege::kPublisher, "op 'publish'").ok());
}

TEST_CASE("status shows each side with root and the daemon's uid") {
  const AccessPolicy policy(998, GrantedIds{{1001, 998}, {2001}}, GrantedIds{});
  const boost::json::object json = policy.ToJson();
  CHECK(boost::json::serialize(json) ==
        R"({"publishers":{"uids":[0,998,1001],"gids":[2001]},"operators":{"uids":[0,998],"gids":[]}})");
  CHECK(boost::json::serialize(AccessPolicy(0).ToJson()) ==
        R"({"publishers":{"uids":[0],"gids":[]},"operators":{"uids":[0],"gids":[]}})");
}

}  // namespace
}  // namespace kvpeer::daemon
