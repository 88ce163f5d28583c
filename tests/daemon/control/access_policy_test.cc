// Who may publish and operate (daemon/control/access_policy.h): everyone
// while a privilege is not configured; once it is, root and the daemon's
// uid, then listed uids, primary gids and supplementary groups; refusals
// name the caller and the settings.
#include <catch2/catch.hpp>

#include <boost/json/serialize.hpp>

#include "daemon/control/access_policy.h"

namespace kvpeer::daemon {
namespace {

PeerCredentials Caller(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  return PeerCredentials{1234, uid, gid, std::move(groups)};
}

TEST_CASE("not configured, every socket user publishes and operates (control-api.md)") {
  const AccessPolicy policy(998);
  for (Privilege privilege : {Privilege::kPublisher, Privilege::kOperator}) {
    CHECK(policy.Holds(Caller(0, 0), privilege));
    CHECK(policy.Holds(Caller(1000, 1000), privilege));
  }
}

TEST_CASE("once configured, only root, the daemon's uid and the listed ids hold a privilege") {
  const AccessPolicy policy(998, GrantedIds{{0}, {}}, GrantedIds{{0}, {}});
  for (Privilege privilege : {Privilege::kPublisher, Privilege::kOperator}) {
    CHECK(policy.Holds(Caller(0, 0), privilege));
    CHECK(policy.Holds(Caller(998, 998), privilege));
    CHECK_FALSE(policy.Holds(Caller(1000, 1000, {998, 0}), privilege));
  }
  CHECK(policy.Holds(Caller(1000, 1000), Privilege::kNone));
  // One side configured leaves the other everyone's.
  const AccessPolicy publishers_only(998, GrantedIds{{1001}, {}}, GrantedIds{});
  CHECK_FALSE(publishers_only.Holds(Caller(1000, 1000), Privilege::kPublisher));
  CHECK(publishers_only.Holds(Caller(1000, 1000), Privilege::kOperator));
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
  const AccessPolicy policy(998, GrantedIds{{1001}, {2001}}, GrantedIds{{0}, {}});
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
  CHECK(boost::json::serialize(json) == R"({"publishers":{"anyone":false,"uids":[0,998,1001],"gids":[2001]},)"
                                        R"("operators":{"anyone":true,"uids":[],"gids":[]}})");
  CHECK(boost::json::serialize(AccessPolicy(0).ToJson()) ==
        R"({"publishers":{"anyone":true,"uids":[],"gids":[]},"operators":{"anyone":true,"uids":[],"gids":[]}})");
}

}  // namespace
}  // namespace kvpeer::daemon
