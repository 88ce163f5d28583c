// PeerConnection's reads and writes over a real loopback socket: a burst of
// control frames goes out in gathered writes (written at once when the
// writer is idle, the rest at the end of the turn or by the writer) and is
// read back many frames per read; every frame arrives once, in order.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <variant>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/random_token.h"
#include "daemon/node/published_blocks.h"
#include "daemon/peer/peer_connection.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

class AnswerCounter : public ConnectionListener {
 public:
  void OnSessionActivity(PeerConnection&, session::PeerSession&) override {}
  void OnConnectionClosed(PeerConnection&) override { ++closes; }
  void OnLookupResp(PeerConnection&) override { ++lookup_resps; }
  int closes = 0;
  int lookup_resps = 0;
};

session::SessionConfig ConfigFor(const std::string& local_id) {
  session::SessionConfig config;
  config.local_id = local_id;
  config.block_len = 64;
  config.random_token = CsprngToken;  // mandatory (base/random_token.h)
  config.epoch = CsprngToken().value();
  config.hash_seed = "seed";
  config.config_fingerprint = "fingerprint";
  return config;
}

// Two connections on the two ends of one loopback TCP connection: `a`
// dialled it, `b` accepted it.
struct ConnectedPair {
  ConnectedPair() : resolver(io.get_executor()) {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const std::string port = std::to_string(acceptor.local_endpoint().port());
    a = std::make_shared<PeerConnection>(PeerStream(tcp::socket(io)), ConfigFor("127.0.0.1:1"), index_a,
                                         "127.0.0.1:" + port, listener_a);
    a->StartDial("127.0.0.1", port, resolver);
    tcp::socket accepted(io);
    acceptor.async_accept(accepted, [](boost::system::error_code) {});
    while (!accepted.is_open()) io.run_one();
    b = std::make_shared<PeerConnection>(PeerStream(std::move(accepted)), ConfigFor("127.0.0.1:" + port), index_b, "",
                                         listener_b);
    b->StartAccepted();
  }
  // Runs the io_context until `done` or a bound of handlers.
  template <typename Done>
  bool RunUntil(Done done) {
    for (int i = 0; i < 200000 && !done(); ++i) io.run_one_for(std::chrono::milliseconds(10));
    return done();
  }
  asio::io_context io;
  PeerResolver resolver;
  NodePublishedBlocks index_a, index_b;
  AnswerCounter listener_a, listener_b;
  std::shared_ptr<PeerConnection> a, b;
};

size_t Sent(const PeerConnection& connection, const protocol::Message& kind) {
  return connection.stats().frames_sent[kind.index()];
}
size_t Received(const PeerConnection& connection, const protocol::Message& kind) {
  return connection.stats().frames_received[kind.index()];
}

TEST_CASE("peer connection io: a burst of lookups goes out whole and every one is answered once", "[peer_connection]") {
  ConnectedPair pair;
  const bool ready = pair.RunUntil([&] { return pair.a->session().ready() && pair.b->session().ready(); });
  INFO("a: " << pair.a->session().close_reason() << "; b: " << pair.b->session().close_reason());
  REQUIRE(ready);
  constexpr int kLookups = 500;  // more than one gathered write and one read-ahead hold
  pair.a->WithSession([&](session::PeerSession& session) {
    for (int i = 0; i < kLookups; ++i) {
      const std::string kv = "request-" + std::to_string(i);
      REQUIRE(session.RegisterLookup(kv, "key-" + std::to_string(i)) == session::ProbeAnswer::kRetry);
      REQUIRE(session.FlushPendingLookups() == 1);
    }
  });
  const protocol::Message lookup = protocol::Lookup{};
  const protocol::Message lookup_resp = protocol::LookupResp{};
  REQUIRE(pair.RunUntil([&] { return pair.listener_a.lookup_resps == kLookups; }));
  CHECK(Sent(*pair.a, lookup) == kLookups);
  CHECK(Received(*pair.b, lookup) == kLookups);
  CHECK(Sent(*pair.b, lookup_resp) == kLookups);
  CHECK(Received(*pair.a, lookup_resp) == kLookups);
  CHECK(pair.a->queued_bytes() == 0);
  CHECK(pair.b->queued_bytes() == 0);
  // All answered miss (nothing is published), each in its own round.
  pair.a->WithSession([&](session::PeerSession& session) {
    for (int i = 0; i < kLookups; ++i) {
      CHECK(session.RegisterLookup("request-" + std::to_string(i), "key-" + std::to_string(i)) ==
            session::ProbeAnswer::kMiss);
    }
  });
  CHECK(pair.listener_a.closes == 0);
  CHECK(pair.listener_b.closes == 0);
  pair.a->Close(session::CloseCause::kShutdown, "test over");
  pair.b->Close(session::CloseCause::kShutdown, "test over");
}

}  // namespace
}  // namespace kvpeer::daemon
