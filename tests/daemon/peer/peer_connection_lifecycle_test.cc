// PeerConnection's lifecycle seen from its owner: engine ops through
// WithSession always run the after-step, and a connection closed before it
// started reaches the closed phase and reports it once (daemon/peer/peer_phase.h).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/random_token.h"
#include "daemon/node/published_blocks.h"
#include "daemon/peer/peer_connection.h"

namespace kvpeer::daemon {
namespace {

class CountingListener : public ConnectionListener {
 public:
  void OnSessionActivity(PeerConnection&, session::PeerSession&) override { ++activities; }
  void OnConnectionClosed(PeerConnection&) override { ++closes; }
  int activities = 0;
  int closes = 0;
};

struct UnstartedConnection {
  UnstartedConnection() {
    session::SessionConfig config;
    config.local_id = "127.0.0.1:1";
    config.block_len = 64;
    config.random_token = CsprngToken;  // mandatory (base/random_token.h)
    connection = std::make_shared<PeerConnection>(PeerStream(boost::asio::ip::tcp::socket(io)), std::move(config),
                                                  index, "127.0.0.1:2", listener);
  }
  boost::asio::io_context io;
  NodePublishedBlocks index;
  CountingListener listener;
  std::shared_ptr<PeerConnection> connection;
};

TEST_CASE("peer connection: WithSession runs the after-step and returns the operation's result", "[peer_connection]") {
  UnstartedConnection fixture;
  PeerConnection& connection = *fixture.connection;
  const size_t loads = connection.WithSession([](session::PeerSession& session) { return session.LoadsInFlight(); });
  CHECK(loads == 0);
  CHECK(fixture.listener.activities == 1);
  bool ran = false;
  connection.WithSession([&](session::PeerSession&) { ran = true; });
  CHECK(ran);
  CHECK(fixture.listener.activities == 2);
  CHECK_FALSE(connection.session_over());
}

TEST_CASE("peer connection: closed before it started, it is closed and says so once", "[peer_connection]") {
  UnstartedConnection fixture;
  PeerConnection& connection = *fixture.connection;
  connection.Close(session::CloseCause::kShutdown, "shutting down");
  CHECK(connection.session_over());
  CHECK(connection.closed_by_owner());
  CHECK(fixture.listener.closes == 1);
  connection.Close(session::CloseCause::kOperator, "again");  // no second close, no second report
  connection.WithSession([](session::PeerSession&) {});
  CHECK(fixture.listener.closes == 1);
  CHECK(connection.session().close_reason() == "shutting down");
  CHECK(connection.session().close_cause() == session::CloseCause::kShutdown);
}

}  // namespace
}  // namespace kvpeer::daemon
