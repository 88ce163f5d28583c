// PeerSession: a session closed in favour of another connection to the same
// peer hands its unserved work back instead of failing it
// (docs/wire-protocol.md, section 9, "(f) Work on a superseded connection").
#include <catch2/catch.hpp>

#include "session/peer_session.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing {
namespace {

using State = PeerSession::State;

// A disaggregated load and an unanswered probe, queued before ready.
void QueueWork(LoneSession& s) {
  REQUIRE(s.session->RequestBlocks(1, "pd", {"k1", "k2"}, {4, 5}, s.node.region->Sink()).ok());
  CHECK(s.session->RegisterLookup("sym", "k3") == ProbeAnswer::kRetry);
  s.session->FlushPendingLookups();
}

TEST_CASE("superseded: closed by this node as a duplicate before ready, everything queued comes back",
          "[session][superseded]") {
  LoneSession s;
  QueueWork(s);
  s.session->Close(CloseCause::kDuplicate, "duplicate");
  CHECK(s.session->hands_back_work());
  CHECK(s.LastDisconnectReason() == "duplicate");
  SessionResults r = s.session->TakeResults();
  CHECK(r.loads.empty());  // no failure result: the load goes on elsewhere
  CHECK(r.failed_request_ids.empty());
  REQUIRE(r.unserved.loads.size() == 1);
  CHECK(r.unserved.loads[0].job_id == 1);
  CHECK(r.unserved.loads[0].block_indexes == std::vector<protocol::SlotIndex>{4, 5});
  REQUIRE(r.unserved.probes.size() == 1);
  CHECK(r.unserved.probes[0].kv_request_id == "sym");
  CHECK(r.unserved.probes[0].keys == std::vector<protocol::Key>{"k3"});
  CHECK(s.session->TakeResults().unserved.empty());  // handed out once
}

TEST_CASE("superseded: the authenticated peer's disconnect 'duplicate' hands back what it never answered",
          "[session][superseded]") {
  LoneSession s;
  s.MakeReady();
  QueueWork(s);  // sent: the peer closed before answering
  CHECK_FALSE(s.session->OnMessage(protocol::Disconnect{"duplicate"}).ok());
  CHECK(s.session->state() == State::kClosed);
  CHECK(s.session->hands_back_work());
  SessionResults r = s.session->TakeResults();
  CHECK(r.loads.empty());
  CHECK(r.unserved.loads.size() == 1);
  CHECK(r.unserved.probes.size() == 1);
}

TEST_CASE("superseded: the peer's disconnect 'idle' hands back what crossed it unserved", "[session][superseded]") {
  LoneSession s;
  s.MakeReady();
  QueueWork(s);
  CHECK_FALSE(s.session->OnMessage(protocol::Disconnect{"idle"}).ok());
  CHECK(s.session->hands_back_work());
  SessionResults r = s.session->TakeResults();
  CHECK(r.loads.empty());
  CHECK(r.unserved.loads.size() == 1);
  CHECK(r.unserved.probes.size() == 1);
}

TEST_CASE("superseded: a 'duplicate' from a peer not yet authenticated changes nothing outside the connection",
          "[session][superseded]") {
  LoneSession s;
  QueueWork(s);
  CHECK_FALSE(s.session->OnMessage(protocol::Disconnect{"duplicate"}).ok());
  CHECK_FALSE(s.session->hands_back_work());
  SessionResults r = s.session->TakeResults();
  CHECK(r.unserved.empty());
  REQUIRE(r.loads.size() == 1);  // fails, as for any unreachable peer
  CHECK_FALSE(r.loads[0].success);
  CHECK(r.failed_request_ids == std::vector<std::string>{"pd", "sym"});
}

TEST_CASE("superseded: other closes fail the work as before", "[session][superseded]") {
  SECTION("the peer restarted") {
    LoneSession s;
    s.MakeReady();
    QueueWork(s);
    s.session->Close(CloseCause::kPeerRestarted, "peer restarted");
    CHECK_FALSE(s.session->hands_back_work());
    SessionResults r = s.session->TakeResults();
    CHECK(r.unserved.empty());
    CHECK(r.loads.size() == 1);
  }
  SECTION("the peer said something else") {
    LoneSession s;
    s.MakeReady();
    QueueWork(s);
    CHECK_FALSE(s.session->OnMessage(protocol::Disconnect{"duplicate connection"}).ok());
    CHECK_FALSE(s.session->hands_back_work());
    CHECK(s.session->TakeResults().loads.size() == 1);
  }
}

}  // namespace
}  // namespace kvpeer::session::testing
