// ControlServer: the daemon's control socket (docs/control-api.md).
//
// Listens on a Unix stream socket (a stale socket file is replaced, a live
// one is not; the file gets mode 0660 and optionally a group), reads every
// client's SO_PEERCRED credentials, logs them and refuses users outside an
// optional allowlist before reading anything. Each connection is a
// ControlConnection; this class answers its lines, dispatching each by the
// op table (daemon/api/control_ops.h): the operator ops on any connection, the
// engine ops on a connection that has said hello (EngineSession does the
// work).
//
// Thread-safety: none; everything runs on the daemon's one io_context.
//
// Lifetime: the EngineRegistry (and the peer side it reaches) must outlive
// the server. Destroying the server stops it; connections are closed and
// their engine sessions closed at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "daemon/api/api_error.h"
#include "daemon/control/access_policy.h"
#include "daemon/control/control_connection.h"
#include "daemon/api/control_ops.h"
#include "daemon/control/engine_registry.h"
#include "daemon/metrics/limit_reporter.h"

namespace kvpeer::daemon {

struct ControlServerOptions {
  std::string socket_path;
  // Reported by `status`.
  std::string node_id;
  std::string listen;          // the bound peer address (a port 0 listen shows its real port)
  boost::json::object config;  // effective settings, keyed by flag name without dashes, no secrets
  // The socket file's group (mode 0660 lets it in); unset = the daemon's.
  std::optional<uint32_t> socket_group;
  // Allowlist of peer uids and gids; both empty = any local user. The
  // daemon's own uid is always allowed.
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
  // Who may publish and store, and who may connect and disconnect peers
  // (--publisher-*, --operator-*).
  AccessPolicy access;
  // --max-control-connections: one beyond is answered one conflict line
  // and closed (docs/control-api.md section 4). 0 = no limit.
  size_t max_connections = 256;
};

class ControlServer : private ControlHandler, private ControlOpHandlers {
 public:
  ControlServer(boost::asio::io_context& io, ControlServerOptions options, EngineRegistry& engines);
  ~ControlServer() override;
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Binds the socket and starts accepting. kInternal naming the path and
  // the reason when the socket cannot be created (or another daemon is
  // listening on it).
  Status Start();
  // From now on the ops the table marks as new work answer shutting_down;
  // the others still work so engines can collect the results of the drain
  // (docs/control-api.md, "Shutdown").
  void BeginShutdown();
  // Stops accepting, closes every connection (closing its engine session)
  // and removes the socket file. Idempotent.
  void Stop();

  // The `listen` reported by status, when known only after construction.
  void set_listen(std::string listen) { options_.listen = std::move(listen); }
  // The `config` reported by status, after a reload changed live settings.
  void set_config(boost::json::object config) { options_.config = std::move(config); }
  // The `metrics` op's text (also served by the --metrics-listen listener).
  std::string MetricsText() const;
  const std::string& socket_path() const { return options_.socket_path; }
  size_t connection_count() const { return connections_.size(); }

 private:
  // Outlives the server while the accept coroutine is suspended, so a
  // resumption after destruction finds `server` null and ends.
  struct AcceptState {
    explicit AcceptState(boost::asio::io_context& io) : acceptor(io) {}
    boost::asio::local::stream_protocol::acceptor acceptor;
    ControlServer* server;
  };

  static boost::asio::awaitable<void> AcceptLoop(std::shared_ptr<AcceptState> state);
  void OnAccepted(boost::asio::local::stream_protocol::socket socket);
  bool Allowed(const PeerCredentials& credentials) const;
  // Answers a connection beyond --max-control-connections with one
  // conflict line; the caller then drops (closes) it.
  void RefuseOverLimit(boost::asio::local::stream_protocol::socket& socket, const PeerCredentials& credentials);
  Status RemoveStaleSocket() const;

  // ControlHandler.
  std::optional<boost::asio::awaitable<std::string>> HandleLine(ControlConnection& connection, ControlLine& line,
                                                                std::string* out) override;
  std::string TooLargeResponse() override;
  void OnConnectionClosed(ControlConnection* connection) override;

  // Answers a request of `row` that waits; owns what it reads while it
  // waits. The answer line ends with a newline; empty when the connection
  // closed meanwhile.
  boost::asio::awaitable<std::string> AnswerWaiting(std::shared_ptr<ControlConnection> connection,
                                                    boost::json::value parsed, ControlLine line, const ControlOp* row);

  // ControlOpHandlers: one per row of the op table.
  OpAnswer NodeStatus(OpCall& call) override;
  OpAnswer Metrics(OpCall& call) override;
  OpWait Connect(OpCall& call) override;
  OpAnswer Disconnect(OpCall& call) override;
  OpAnswer Hello(OpCall& call) override;
  OpAnswer RegisterRegion(OpCall& call) override;
  OpAnswer Publish(OpCall& call) override;
  OpWait PublishSealed(OpCall& call) override;
  OpAnswer Unpublish(OpCall& call) override;
  OpAnswer Lookup(OpCall& call) override;
  OpWait LookupWaiting(OpCall& call) override;
  OpAnswer Flush(OpCall& call) override;
  OpAnswer Load(OpCall& call) override;
  OpAnswer Store(OpCall& call) override;
  OpWait StoreSealed(OpCall& call) override;
  OpAnswer Finish(OpCall& call) override;
  OpAnswer Poll(OpCall& call) override;
  OpWait PollWaiting(OpCall& call) override;

  boost::json::object StatusFields() const;
  // Counts the answer and turns it into its line (without newline).
  std::string Answer(const boost::json::value& id, const Status& status, boost::json::object fields);
  // Counts the answer and appends its line (with newline) to *out.
  void AppendAnswer(std::string* out, const boost::json::value& id, const Status& status,
                    const boost::json::object& fields);

  boost::asio::io_context& io_;
  ControlServerOptions options_;
  EngineRegistry& engines_;
  std::shared_ptr<AcceptState> accept_;
  std::map<ControlConnection*, std::shared_ptr<ControlConnection>> connections_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  LimitReporter limits_;
  bool listening_ = false;
  bool shutting_down_ = false;
};

}  // namespace kvpeer::daemon
