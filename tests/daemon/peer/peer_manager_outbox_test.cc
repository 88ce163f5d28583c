// PeerManager never hands the engine side a result while one of the engine
// side's calls (Load, Store, Lookup) is still running: results leave through
// its outbox, drained on a later turn of the event loop.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "daemon/node/node_model.h"
#include "daemon/node/published_blocks.h"
#include "daemon/node/shm_region.h"
#include "daemon/peer/peer_manager.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;

constexpr uint64_t kBlockLen = 4096;

// Counts every call that arrives while the test is inside a PeerManager call.
class GuardedSink : public ResultSink {
 public:
  void OnLoadResult(const session::JobResult& result) override {
    Check();
    loads.push_back(result);
  }
  void OnStoreResult(const session::JobResult& result) override {
    Check();
    stores.push_back(result);
  }
  void OnRequestFailed(const std::string&, const std::string&) override { Check(); }
  void OnProbesChanged(const std::string&, bool) override { Check(); }
  // Runs `call` as the engine side would: anything delivered meanwhile is a
  // re-entry.
  template <typename Call>
  auto Inside(Call&& call) {
    inside = true;
    auto result = call();
    inside = false;
    return result;
  }
  bool inside = false;
  int reentries = 0;
  std::vector<session::JobResult> loads;
  std::vector<session::JobResult> stores;

 private:
  void Check() { reentries += inside ? 1 : 0; }
};

struct Node {
  Node(asio::io_context& io, session::Duration unbound_timeout = std::chrono::seconds(60))
      : model(kBlockLen, "fp", "seed"), memfd(testing::MakeMemfd(4 * kBlockLen)) {
    REQUIRE(ShmRegion::MapFd(memfd.get(), {4, kBlockLen, 0}, &region).ok());
    index.AddEngine(1, region, nullptr);
    PeerManagerConfig config;
    config.listen_host = "127.0.0.1";
    config.listen_port = 0;
    config.handshake_timeout = std::chrono::seconds(5);
    config.unbound_timeout = unbound_timeout;
    peers = std::make_unique<PeerManager>(io, config, model, index, sink);
    REQUIRE(peers->Listen().ok());
    peers->set_node_id(peers->listen_address());
  }
  NodeModel model;
  NodePublishedBlocks index;
  UniqueFd memfd;
  std::shared_ptr<ShmRegion> region;
  GuardedSink sink;
  std::unique_ptr<PeerManager> peers;
};

using testing::RunUntil;

// A local port nothing listens on.
std::string ClosedPort(asio::io_context& io) {
  asio::ip::tcp::acceptor probe(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t port = probe.local_endpoint().port();
  probe.close();
  return "127.0.0.1:" + std::to_string(port);
}

TEST_CASE("peer manager: a load's result never arrives before Load returns", "[peer][outbox]") {
  asio::io_context io;
  Node a(io);
  Node b(io);
  const std::vector<protocol::Key> keys = {"00aa", "00bb"};
  REQUIRE(a.index.Publish(1, keys, {0, 1}).ok());
  const std::string peer_a = a.peers->listen_address();
  std::vector<session::ProbeAnswer> answers;
  REQUIRE(b.sink.Inside([&] { return b.peers->Lookup(peer_a, "req-1", keys, true, &answers); }).ok());
  REQUIRE(RunUntil(io, [&] {
    b.sink.Inside([&] { return b.peers->Lookup(peer_a, "req-1", keys, false, &answers); })
        .IgnoreError();  // polled: a lookup refused while the dial is under way is asked again
    return answers == std::vector<session::ProbeAnswer>{session::ProbeAnswer::kHit, session::ProbeAnswer::kHit};
  }));
  REQUIRE(b.sink.Inside([&] { return b.peers->Load(7, peer_a, "req-1", keys, {2, 3}, MakeSlotSink(b.region)); }).ok());
  REQUIRE(RunUntil(io, [&] { return !b.sink.loads.empty(); }));
  CHECK(b.sink.loads[0].success);

  // A peer nobody answers: the first load waits for the dial and fails
  // with it; during the backoff that follows, a load fails at once, with
  // an error and no result.
  const std::string dead = ClosedPort(io);
  REQUIRE(b.sink.Inside([&] { return b.peers->Load(8, dead, "req-2", keys, {2, 3}, MakeSlotSink(b.region)); }).ok());
  REQUIRE(RunUntil(io, [&] { return b.sink.loads.size() == 2; }));
  CHECK_FALSE(b.sink.loads[1].success);
  Status refused = b.sink.Inside([&] { return b.peers->Load(9, dead, "req-2", keys, {2, 3}, MakeSlotSink(b.region)); });
  CHECK(refused.code() == Status::Code::kUnavailable);
  io.restart();
  io.run_for(std::chrono::milliseconds(20));
  CHECK(b.sink.loads.size() == 2);  // no result is owed for job 9
  CHECK(b.sink.reentries == 0);
}

TEST_CASE("peer manager: finishing a request with a load in flight reports the load after Finish returns",
          "[peer][outbox]") {
  // The client role fails a load in flight on finish at once ("request
  // finished"); before the outbox that result reached the engine side from
  // inside Finish.
  asio::io_context io;
  Node a(io);
  Node b(io);
  const std::vector<protocol::Key> keys = {"00aa", "00bb"};
  REQUIRE(a.index.Publish(1, keys, {0, 1}).ok());
  const std::string peer_a = a.peers->listen_address();
  std::vector<session::ProbeAnswer> answers;
  REQUIRE(RunUntil(io, [&] {
    b.peers->Lookup(peer_a, "req-1", keys, true, &answers).IgnoreError();  // polled, as above
    return answers == std::vector<session::ProbeAnswer>{session::ProbeAnswer::kHit, session::ProbeAnswer::kHit};
  }));
  REQUIRE(b.sink.Inside([&] { return b.peers->Load(7, peer_a, "req-1", keys, {2, 3}, MakeSlotSink(b.region)); }).ok());
  b.sink.Inside([&] {
    b.peers->Finish("req-1", {peer_a}, false);
    return 0;
  });
  CHECK(b.sink.loads.empty());
  CHECK(b.sink.reentries == 0);
  REQUIRE(RunUntil(io, [&] { return !b.sink.loads.empty(); }));
  CHECK(b.sink.loads[0].job_id == 7);
  CHECK_FALSE(b.sink.loads[0].success);
  CHECK(b.sink.loads[0].failure == session::JobFailure::kRequestFinished);
}

}  // namespace
}  // namespace kvpeer::daemon
