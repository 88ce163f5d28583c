// ArbitrateConnections: the duplicate-connection and restart rules of
// wire-protocol.md section 1.
#include <catch2/catch.hpp>

#include "session/connection_arbiter.h"

namespace kvpeer::session {
namespace {

const std::string kSmall = "10.0.0.1:7000";
const std::string kLarge = "10.0.0.2:7000";
const std::string kEpoch1(32, '1');
const std::string kEpoch2(32, '2');

ConnectionFacts Facts(bool ready, bool dialled_locally, std::string epoch) {
  return ConnectionFacts{ready, dialled_locally, std::move(epoch)};
}

TEST_CASE("a ready connection keeps a same-epoch newcomer from the same direction out", "[arbiter]") {
  for (bool dialled : {true, false}) {
    CHECK(ArbitrateConnections(kSmall, kLarge, Facts(true, dialled, kEpoch1), Facts(true, dialled, kEpoch1)) ==
          Arbitration::kCloseNewDuplicate);
    CHECK(ArbitrateConnections(kLarge, kSmall, Facts(true, dialled, kEpoch1), Facts(true, dialled, kEpoch1)) ==
          Arbitration::kCloseNewDuplicate);
  }
}

TEST_CASE("opposite directions, same epoch: the node-id rule even when the old one is ready", "[arbiter]") {
  // Readiness is reached at different moments on the two nodes, so only the
  // node ids may decide (see connection_arbiter.cc).
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(true, true, kEpoch1), Facts(true, false, kEpoch1)) ==
        Arbitration::kCloseNewDuplicate);
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(true, false, kEpoch1), Facts(true, true, kEpoch1)) ==
        Arbitration::kCloseOldDuplicate);
  CHECK(ArbitrateConnections(kLarge, kSmall, Facts(true, true, kEpoch1), Facts(true, false, kEpoch1)) ==
        Arbitration::kCloseOldDuplicate);
  CHECK(ArbitrateConnections(kLarge, kSmall, Facts(true, false, kEpoch1), Facts(true, true, kEpoch1)) ==
        Arbitration::kCloseNewDuplicate);
}

TEST_CASE("crossed dials agree whatever became ready first on either node", "[arbiter]") {
  // X dialled by the small node, Y by the large one. On each node, either
  // connection may become ready first (and so be `existing`), and
  // `existing` may or may not be ready yet (or even have the peer's epoch).
  const auto survivor = [](Arbitration a, char existing, char incoming) {
    return a == Arbitration::kCloseNewDuplicate ? existing : incoming;
  };
  for (bool existing_ready : {true, false}) {
    for (bool epoch_known : {true, false}) {
      const std::string e1 = epoch_known ? kEpoch1 : "", e2 = epoch_known ? kEpoch2 : "";
      for (bool small_x_first : {true, false}) {
        for (bool large_x_first : {true, false}) {
          // On the small node X is its dial; on the large node Y is.
          const char on_small = small_x_first
                                    ? survivor(ArbitrateConnections(kSmall, kLarge, Facts(existing_ready, true, e2),
                                                                    Facts(true, false, kEpoch2)),
                                               'x', 'y')
                                    : survivor(ArbitrateConnections(kSmall, kLarge, Facts(existing_ready, false, e2),
                                                                    Facts(true, true, kEpoch2)),
                                               'y', 'x');
          const char on_large = large_x_first
                                    ? survivor(ArbitrateConnections(kLarge, kSmall, Facts(existing_ready, false, e1),
                                                                    Facts(true, true, kEpoch1)),
                                               'x', 'y')
                                    : survivor(ArbitrateConnections(kLarge, kSmall, Facts(existing_ready, true, e1),
                                                                    Facts(true, false, kEpoch1)),
                                               'y', 'x');
          CHECK(on_small == 'x');
          CHECK(on_large == 'x');
        }
      }
    }
  }
}

TEST_CASE("a different epoch means the peer restarted: the new connection replaces the old", "[arbiter]") {
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(true, true, kEpoch1), Facts(false, false, kEpoch2)) ==
        Arbitration::kReplaceOld);
  CHECK(ArbitrateConnections(kLarge, kSmall, Facts(true, false, kEpoch1), Facts(false, false, kEpoch2)) ==
        Arbitration::kReplaceOld);
  // Also while the old one is still handshaking with the earlier incarnation.
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(false, true, kEpoch1), Facts(false, false, kEpoch2)) ==
        Arbitration::kReplaceOld);
}

TEST_CASE("crossed dials: the smaller node's dial survives, on both nodes", "[arbiter]") {
  // On the smaller node: it keeps its own dial, whichever connection came first.
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(false, true, ""), Facts(false, false, kEpoch2)) ==
        Arbitration::kCloseNewDuplicate);
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(false, false, kEpoch2), Facts(false, true, kEpoch2)) ==
        Arbitration::kCloseOldDuplicate);
  // On the larger node: it keeps the smaller node's dial (the one it accepted).
  CHECK(ArbitrateConnections(kLarge, kSmall, Facts(false, true, ""), Facts(false, false, kEpoch1)) ==
        Arbitration::kCloseOldDuplicate);
  CHECK(ArbitrateConnections(kLarge, kSmall, Facts(false, false, kEpoch1), Facts(false, true, kEpoch1)) ==
        Arbitration::kCloseNewDuplicate);
}

TEST_CASE("crossed dials agree: both nodes keep the same TCP connection", "[arbiter]") {
  // Connection X was dialled by the small node, Y by the large one. Each node
  // sees the other connection arrive second in every order.
  for (bool small_sees_x_first : {true, false}) {
    for (bool large_sees_x_first : {true, false}) {
      const ConnectionFacts small_x = Facts(false, true, kEpoch2), small_y = Facts(false, false, kEpoch2);
      const ConnectionFacts large_x = Facts(false, false, kEpoch1), large_y = Facts(false, true, kEpoch1);
      const auto survivor = [](Arbitration a, char existing, char incoming) {
        return a == Arbitration::kCloseNewDuplicate ? existing : incoming;
      };
      const char on_small = small_sees_x_first
                                ? survivor(ArbitrateConnections(kSmall, kLarge, small_x, small_y), 'x', 'y')
                                : survivor(ArbitrateConnections(kSmall, kLarge, small_y, small_x), 'y', 'x');
      const char on_large = large_sees_x_first
                                ? survivor(ArbitrateConnections(kLarge, kSmall, large_x, large_y), 'x', 'y')
                                : survivor(ArbitrateConnections(kLarge, kSmall, large_y, large_x), 'y', 'x');
      CHECK(on_small == 'x');
      CHECK(on_large == 'x');
    }
  }
}

TEST_CASE("node ids compare as plain strings", "[arbiter]") {
  // "10.0.0.10:1" < "10.0.0.9:1" lexicographically, though not numerically.
  CHECK(ArbitrateConnections("10.0.0.10:1", "10.0.0.9:1", Facts(false, true, ""), Facts(false, false, kEpoch1)) ==
        Arbitration::kCloseNewDuplicate);
}

TEST_CASE("the same node dialling twice: the newer attempt survives", "[arbiter]") {
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(false, false, kEpoch2), Facts(false, false, kEpoch2)) ==
        Arbitration::kCloseOldDuplicate);
  CHECK(ArbitrateConnections(kSmall, kLarge, Facts(false, false, ""), Facts(false, false, kEpoch2)) ==
        Arbitration::kCloseOldDuplicate);
  CHECK(ArbitrateConnections(kLarge, kSmall, Facts(false, true, ""), Facts(false, true, kEpoch1)) ==
        Arbitration::kCloseOldDuplicate);
}

TEST_CASE("a node connected to itself keeps both ends", "[arbiter]") {
  CHECK(ArbitrateConnections(kSmall, kSmall, Facts(false, true, ""), Facts(false, false, kEpoch1)) ==
        Arbitration::kKeepBoth);
}

}  // namespace
}  // namespace kvpeer::session
