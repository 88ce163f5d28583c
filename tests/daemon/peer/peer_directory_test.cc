// PeerDirectory: the peer side's decisions, driven by plain calls with a
// fake clock (no sockets). The cases named "pins <commit>" replay a fix made
// on main to PeerManager's hand-back logic; each fails without that fix.
// 977a57d's one-line PeerManager change (the idle timeout carried into every
// session) is pinned in peer_session_config_test.cc; the case here pins what
// that merge made of an idle close on the directory's side.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "daemon/peer/peer_directory.h"

namespace kvpeer::daemon {
namespace {

using session::CloseCause;
using session::ConnectionFacts;
using namespace std::chrono_literals;

constexpr auto kLoadTimeout = std::chrono::seconds(30);

struct DirectoryFixture {
  session::TimePoint now = session::TimePoint() + std::chrono::hours(1);
  PeerDirectory directory{PeerDirectoryConfig{"node-b:5710", 0, std::chrono::seconds(60), kLoadTimeout},
                          [this] { return now; }};

  // Dials `peer` and brings the dial to ready; returns its connection.
  ConnectionId DialReady(const std::string& peer) {
    PeerRoute route = directory.Acquire(peer);
    REQUIRE(route.kind == PeerRoute::Kind::kDial);
    REQUIRE(directory.OnReady(peer, route.connection).has_value());
    return route.connection;
  }
};

session::UnservedLoad Load(session::JobId job, const std::string& kv) {
  return session::UnservedLoad{job, kv, {"k" + std::to_string(job)}, {static_cast<protocol::SlotIndex>(job)}, {}};
}

session::UnservedWork Work(std::vector<session::UnservedLoad> loads, std::vector<std::string> probe_kvs) {
  session::UnservedWork work;
  work.loads = std::move(loads);
  for (const std::string& kv : probe_kvs) work.probes.push_back(session::UnservedProbes{kv, {"p-" + kv}});
  return work;
}

TEST_CASE("peer directory: a dial is counted once and reused while live", "[peer][directory]") {
  DirectoryFixture f;
  PeerRoute first = f.directory.Acquire("node-a:5710");
  CHECK(first.kind == PeerRoute::Kind::kDial);
  CHECK(f.directory.entries().at("node-a:5710").state == PeerState::kConnecting);
  PeerRoute again = f.directory.Acquire("node-a:5710");
  CHECK(again.kind == PeerRoute::Kind::kUse);
  CHECK(again.connection == first.connection);
  f.directory.OnHandshaking("node-a:5710", first.connection);
  CHECK(f.directory.entries().at("node-a:5710").state == PeerState::kHandshaking);
  CHECK(f.directory.entries().at("node-a:5710").counters.dials == 1);
}

TEST_CASE("peer directory: crossed dials keep the smaller node's dial on both ends", "[peer][directory]") {
  // node-b is this node. Against node-a (smaller) the accepted connection
  // survives; against node-c (larger) this node's own dial does.
  DirectoryFixture f;
  ConnectionId to_a = f.directory.Acquire("node-a:5710").connection;
  Adoption from_a =
      f.directory.Adopt("node-a:5710", ConnectionFacts{false, true, ""}, ConnectionFacts{true, false, "e1"});
  CHECK(from_a.kind == Adoption::Kind::kSupersede);
  CHECK(from_a.old == to_a);
  CHECK(from_a.cause == CloseCause::kDuplicate);
  CHECK(f.directory.Connection("node-a:5710") == from_a.connection);
  // The superseded dial's close changes nothing: the entry never passes through closed.
  CHECK_FALSE(f.directory.OnClosed("node-a:5710", to_a, "duplicate").has_value());
  CHECK(f.directory.entries().at("node-a:5710").state == PeerState::kConnecting);

  ConnectionId to_c = f.directory.Acquire("node-c:5710").connection;
  Adoption from_c =
      f.directory.Adopt("node-c:5710", ConnectionFacts{false, true, ""}, ConnectionFacts{true, false, "e1"});
  CHECK(from_c.kind == Adoption::Kind::kCloseNew);
  CHECK(f.directory.Connection("node-c:5710") == to_c);
}

TEST_CASE("peer directory: a duplicate of a ready connection closes; a restart replaces", "[peer][directory]") {
  DirectoryFixture f;
  Adoption first = f.directory.Adopt("node-a:5710", std::nullopt, ConnectionFacts{true, false, "e1"});
  REQUIRE(first.kind == Adoption::Kind::kAdopt);
  REQUIRE(f.directory.OnReady("node-a:5710", first.connection).has_value());
  Adoption duplicate =
      f.directory.Adopt("node-a:5710", ConnectionFacts{true, false, "e1"}, ConnectionFacts{true, false, "e1"});
  CHECK(duplicate.kind == Adoption::Kind::kCloseNew);
  f.directory.Bind("kv1", "node-a:5710");
  Adoption restarted =
      f.directory.Adopt("node-a:5710", ConnectionFacts{true, false, "e1"}, ConnectionFacts{true, false, "e2"});
  CHECK(restarted.kind == Adoption::Kind::kSupersede);
  CHECK(restarted.cause == CloseCause::kPeerRestarted);
  CHECK(restarted.reason == session::PeerDisconnectReason::kPeerRestarted);
  CHECK(restarted.old == first.connection);
  CHECK_FALSE(f.directory.BoundPeer("kv1").has_value());  // the old session's bindings went with it
}

TEST_CASE("peer directory: max-peers refuses new peers, not a live peer's second connection", "[peer][directory]") {
  DirectoryFixture f;
  PeerDirectory limited{PeerDirectoryConfig{"node-b:5710", 1, 60s, kLoadTimeout}, [&f] { return f.now; }};
  REQUIRE(limited.Acquire("node-a:5710").kind == PeerRoute::Kind::kDial);
  PeerRoute refused = limited.Acquire("node-c:5710");
  CHECK(refused.kind == PeerRoute::Kind::kAtPeerLimit);
  CHECK_FALSE(limited.entries().contains("node-c:5710"));  // a peer never dialled is not listed
  CHECK(limited.Adopt("node-d:5710", std::nullopt, ConnectionFacts{true, false, "e"}).kind ==
        Adoption::Kind::kTooManyPeers);
  CHECK(limited.Adopt("node-a:5710", ConnectionFacts{false, true, ""}, ConnectionFacts{true, false, "e"}).kind ==
        Adoption::Kind::kSupersede);
}

TEST_CASE("peer directory: failed dials back off 100 ms doubling to 5 s; ready resets it", "[peer][directory]") {
  DirectoryFixture f;
  const std::string peer = "node-a:5710";
  std::vector<session::Duration> seen;
  for (int i = 0; i < 8; ++i) {
    PeerRoute route = f.directory.Acquire(peer);
    REQUIRE(route.kind == PeerRoute::Kind::kDial);
    REQUIRE(f.directory.OnClosed(peer, route.connection, "connection refused").has_value());
    const PeerEntry& entry = f.directory.entries().at(peer);
    CHECK(entry.state == PeerState::kBackoff);
    seen.push_back(entry.backoff);
    PeerRoute waiting = f.directory.Acquire(peer);
    CHECK(waiting.kind == PeerRoute::Kind::kBackoff);
    CHECK(waiting.why == "peer " + peer + " is unreachable (connection refused); retrying after backoff");
    f.now += entry.backoff;
  }
  const std::vector<session::Duration> expected = {100ms, 200ms, 400ms, 800ms, 1600ms, 3200ms, 5s, 5s};
  CHECK(seen == expected);
  ConnectionId ready = f.DialReady(peer);
  CHECK(f.directory.entries().at(peer).backoff == session::Duration(0));
  CHECK_FALSE(f.directory.entries().at(peer).last_error.has_value());
  // A ready connection's close (the peer's idle close, say) is no failed dial.
  REQUIRE(f.directory.OnClosed(peer, ready, "peer disconnected: idle").has_value());
  CHECK(f.directory.entries().at(peer).state == PeerState::kClosed);
  CHECK(f.directory.Acquire(peer).kind == PeerRoute::Kind::kDial);
}

TEST_CASE("peer directory: connect waiters are answered by ready or by the close", "[peer][directory]") {
  DirectoryFixture f;
  std::vector<std::string> answers;
  PeerRoute route = f.directory.Acquire("node-a:5710");
  f.directory.AddWaiter("node-a:5710", [&](Status s) { answers.push_back(s.ok() ? "ok" : s.message()); });
  auto waiters = f.directory.OnReady("node-a:5710", route.connection);
  REQUIRE(waiters.has_value());
  REQUIRE(waiters->size() == 1);
  (*waiters)[0](Status::Ok());
  CHECK(answers == std::vector<std::string>{"ok"});
  CHECK_FALSE(f.directory.OnReady("node-a:5710", route.connection).has_value());  // ready once
}

TEST_CASE("peer directory: idle entries are reaped after reap_after, busy ones are not", "[peer][directory]") {
  DirectoryFixture f;
  PeerRoute a = f.directory.Acquire("node-a:5710");
  f.directory.OnClosed("node-a:5710", a.connection, "refused");
  PeerRoute c = f.directory.Acquire("node-c:5710");  // stays connecting
  f.now += 59s;
  CHECK(f.directory.Reap().empty());
  f.now += 1s;
  auto reaped = f.directory.Reap();
  REQUIRE(reaped.size() == 1);
  CHECK(reaped[0].first == "node-a:5710");
  CHECK(reaped[0].second == 60s);
  CHECK(f.directory.entries().size() == 1);
  // A waiter keeps an entry without a connection.
  f.directory.AddWaiter("node-c:5710", [](Status) {});
  f.directory.OnClosed("node-c:5710", c.connection, "refused");
  f.directory.AddWaiter("node-c:5710", [](Status) {});
  f.now += 120s;
  CHECK(f.directory.Reap().empty());
  CHECK(f.directory.ReapTick() == 1s);
}

TEST_CASE("peer directory: supply bindings live while the peer's session serves", "[peer][directory]") {
  DirectoryFixture f;
  ConnectionId a = f.DialReady("node-a:5710");
  f.directory.Bind("kv1", "node-a:5710");
  f.directory.UnbindEnded("kv1", "node-c:5710", false);  // another peer's end changes nothing
  f.directory.UnbindEnded("kv1", "node-a:5710", true);   // served again within the batch
  CHECK(f.directory.BoundPeer("kv1") == "node-a:5710");
  f.directory.UnbindEnded("kv1", "node-a:5710", false);
  CHECK_FALSE(f.directory.BoundPeer("kv1").has_value());
  f.directory.Bind("kv2", "node-a:5710");
  f.directory.OnClosed("node-a:5710", a, "gone");
  CHECK(f.directory.binding_count() == 0);
}

// --- Hand-back and resubmission ---

TEST_CASE("peer directory: loads a duplicate close handed back are asked again, at most 4 times (pins f622bc4)",
          "[peer][directory][handback]") {
  // f622bc4: a crossed dial lost the loads on the closed connection; now
  // they are handed back, queued once, and asked again over the survivor,
  // with a bound of 4 per load.
  DirectoryFixture f;
  f.directory.OnLoadStarted(7);
  f.directory.OnLoadStarted(8);
  CHECK(f.directory.HandBack("node-a:5710", Work({Load(7, "kv")}, {"kv"}), CloseCause::kDuplicate, "duplicate"));
  CHECK_FALSE(f.directory.HandBack("node-a:5710", Work({Load(8, "kv")}, {}), CloseCause::kDuplicate, "duplicate"));
  auto queued = f.directory.TakeResubmissions();
  REQUIRE(queued.size() == 2);
  CHECK(queued[0].work.loads.size() == 1);
  CHECK(queued[0].work.probes.size() == 1);  // this node chose the replacement: probes go there
  for (unsigned i = 0; i < kMaxResubmits; ++i) {
    ResubmitVerdict verdict = f.directory.AllowResubmit(7);
    CHECK(verdict.allowed);
    CHECK(verdict.times_asked == i);
  }
  ResubmitVerdict fifth = f.directory.AllowResubmit(7);
  CHECK_FALSE(fifth.allowed);
  CHECK(fifth.times_asked == 4);
  f.directory.OnLoadEnded(7);
  CHECK(f.directory.loads_tracked() == 1);  // job 8 still owes its result
}

TEST_CASE("peer directory: the peer's own duplicate or idle close drops the probes (pins b6a6c9e)",
          "[peer][directory][handback]") {
  // b6a6c9e: probes handed back after the peer's "duplicate" or "idle" were
  // re-sent over a new dial, and a peer closing every connection as idle
  // made a redial loop. Only a duplicate this node settled keeps them.
  DirectoryFixture f;
  for (CloseCause cause : {CloseCause::kPeerDisconnected, CloseCause::kIdle}) {
    REQUIRE(f.directory.HandBack("node-a:5710", Work({Load(1, "kv")}, {"kv"}), cause, "peer said so"));
    auto queued = f.directory.TakeResubmissions();
    REQUIRE(queued.size() == 1);
    CHECK(queued[0].work.probes.empty());
    CHECK(queued[0].work.loads.size() == 1);
  }
}

TEST_CASE("peer directory: nothing is queued when nothing is left to ask again (pins 3452067)",
          "[peer][directory][handback]") {
  // 3452067: probes-only work handed back after the peer's own close was
  // queued empty once its probes were dropped (a resubmission and a log
  // line about zero loads).
  DirectoryFixture f;
  CHECK_FALSE(f.directory.HandBack("node-a:5710", Work({}, {"kv"}), CloseCause::kPeerDisconnected, "duplicate"));
  CHECK_FALSE(f.directory.resubmissions_waiting());
  CHECK(f.directory.TakeResubmissions().empty());
}

TEST_CASE("peer directory: finishing a request fails its queued loads and drops its probes (pins 32198fe)",
          "[peer][directory][handback]") {
  // 32198fe: a request finished while its handed-back work waited for the
  // posted resubmission was asked again after the finish, so blocks could
  // land in slots the engine had already reused.
  DirectoryFixture f;
  f.directory.HandBack("node-a:5710", Work({Load(1, "kv"), Load(2, "other")}, {"kv", "other"}), CloseCause::kDuplicate,
                       "duplicate");
  CHECK(f.directory.FinishRequest("node-c:5710", "kv").empty());  // another peer's request
  CHECK(f.directory.FinishRequest("node-a:5710", "kv") == std::vector<session::JobId>{1});
  auto queued = f.directory.TakeResubmissions();
  REQUIRE(queued.size() == 1);
  REQUIRE(queued[0].work.loads.size() == 1);
  CHECK(queued[0].work.loads[0].job_id == 2);
  REQUIRE(queued[0].work.probes.size() == 1);
  CHECK(queued[0].work.probes[0].kv_request_id == "other");
}

TEST_CASE("peer directory: work crossing the peer's idle close is asked again over a fresh dial (pins 977a57d)",
          "[peer][directory][handback]") {
  // 977a57d: the peer's "idle" after authentication hands back the work
  // that crossed it, asked again over a fresh dial: the entry is closed
  // (an idle close is no failed dial, so no backoff delays the redial), the
  // load is within its budget, and the next route is a new dial.
  DirectoryFixture f;
  ConnectionId ready = f.DialReady("node-a:5710");
  f.directory.OnLoadStarted(3);
  REQUIRE(f.directory.OnClosed("node-a:5710", ready, "peer disconnected: idle").has_value());
  REQUIRE(f.directory.HandBack("node-a:5710", Work({Load(3, "kv")}, {"kv"}), CloseCause::kIdle, "idle"));
  CHECK(f.directory.entries().at("node-a:5710").state == PeerState::kClosed);
  CHECK(f.directory.AllowResubmit(3).allowed);
  PeerRoute again = f.directory.Acquire("node-a:5710");
  CHECK(again.kind == PeerRoute::Kind::kDial);
  CHECK(again.connection != ready);
}

TEST_CASE("peer directory: the resubmission bound counts from the load's start (issue 25 item 6)",
          "[peer][directory][handback]") {
  // The security review: counted from the first hand-back, a peer that held
  // each fetch for almost a load timeout before its first close kept the
  // engine's slots for about twice the load timeout. Counted from the
  // engine's submission, the load is not asked again once that has passed.
  DirectoryFixture f;
  f.directory.OnLoadStarted(5);
  f.now += kLoadTimeout - 1ms;
  const ResubmitVerdict late = f.directory.AllowResubmit(5);
  CHECK(late.allowed);
  CHECK(late.time_left == 1ms);  // what is left, never a fresh load timeout
  f.now += 1ms;
  CHECK_FALSE(f.directory.AllowResubmit(5).allowed);
}

TEST_CASE("peer directory: after shutdown a failed dial is no backoff", "[peer][directory]") {
  DirectoryFixture f;
  PeerRoute route = f.directory.Acquire("node-a:5710");
  f.directory.BeginShutdown();
  REQUIRE(f.directory.OnClosed("node-a:5710", route.connection, "daemon shutting down").has_value());
  CHECK(f.directory.entries().at("node-a:5710").state == PeerState::kClosed);
}

}  // namespace
}  // namespace kvpeer::daemon
