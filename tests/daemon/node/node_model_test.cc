// The node's model settings (daemon/node/node_model.h): a hello that may not
// fix unset settings (a caller that is not a publisher, issue 25 finding 5)
// changes nothing and says why; settings already fixed are joined as before.
#include <catch2/catch.hpp>

#include "daemon/node/node_model.h"

namespace kvpeer::daemon {
namespace {

const ModelSettings kReal{65536, "llama", "seed"};
const Status kMayNot = Status::Invalid("fixing them is refused: uid 65534 (gid 65534) is not a publisher");

TEST_CASE("a hello that may not adopt leaves unset settings unset and names them") {
  NodeModel model(std::nullopt, "llama", std::nullopt);
  const Status refused = model.CheckOrAdopt(ModelSettings{1, "llama", "seed"}, kMayNot);
  CHECK(refused.code() == Status::Code::kIncompatible);
  CHECK(refused.message().find("(block_len, hash_seed) are not fixed yet") != std::string::npos);
  CHECK(refused.message().find("uid 65534") != std::string::npos);
  CHECK(refused.message().find("set block-len, config-fingerprint and hash-seed") != std::string::npos);
  CHECK_FALSE(model.configured());
  // A settled mismatch is still named as such first.
  CHECK(model.CheckOrAdopt(ModelSettings{1, "other", "seed"}, kMayNot).message().find("config_fingerprint") !=
        std::string::npos);
  // The real engine (allowed) fixes them; then the unprivileged one joins.
  CHECK(model.CheckOrAdopt(kReal).ok());
  CHECK(model.CheckOrAdopt(kReal, kMayNot).ok());
  CHECK(model.CheckOrAdopt(ModelSettings{1, "llama", "seed"}, kMayNot).message() ==
        "block_len 1 differs from the node's 65536");
}

TEST_CASE("settings fixed by the config need no privilege to join") {
  NodeModel model(65536, "llama", "seed");
  CHECK(model.CheckOrAdopt(kReal, kMayNot).ok());
}

}  // namespace
}  // namespace kvpeer::daemon
