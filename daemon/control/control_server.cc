#include "daemon/control/control_server.h"

#include <cmath>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include "config/version.h"
#include "daemon/metrics/accept_backoff.h"
#include "daemon/control/engine_session.h"
#include "daemon/api/json_answer.h"
#include "daemon/api/json_request.h"
#include "daemon/api/request_parsers.h"
#include "daemon/control/metrics_text.h"
#include "daemon/control/op_answers_json.h"
#include "daemon/control/peer_status_json.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using Local = asio::local::stream_protocol;

// A last resort only: the peer side answers a connect within its handshake
// timeout.
constexpr auto kConnectCeiling = std::chrono::minutes(5);

std::string Errno() { return std::strerror(errno); }

}  // namespace

ControlServer::ControlServer(asio::io_context& io, ControlServerOptions options, EngineRegistry& engines)
    : io_(io), options_(std::move(options)), engines_(engines), accept_(std::make_shared<AcceptState>(io)) {
  accept_->server = this;
}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::RemoveStaleSocket() const {
  const std::string& path = options_.socket_path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Internal("control socket " + path + ": " + Errno());
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status::Internal("control socket " + path + " exists and is not a socket; not replacing it");
  }
  // A socket file some process still accepts on is not stale.
  Local::socket probe(io_);
  boost::system::error_code ec;
  probe.connect(Local::endpoint(path), ec);
  if (!ec) return Status::Internal("control socket " + path + " is in use by a running process");
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::Internal("cannot remove stale control socket " + path + ": " + Errno());
  }
  return Status::Ok();
}

Status ControlServer::Start() {
  const std::string& path = options_.socket_path;
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::Internal("control socket path '" + path +
                            "' must be 1 ..= " + std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  boost::system::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code fs_ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, fs_ec);
  if (Status bad = RemoveStaleSocket(); !bad.ok()) return bad;
  Local::acceptor& acceptor = accept_->acceptor;
  acceptor.open(Local(), ec);
  if (!ec) acceptor.bind(Local::endpoint(path), ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor.close(ec);
    return Status::Internal("cannot listen on control socket " + path + ": " + ec.message());
  }
  listening_ = true;
  if (::chmod(path.c_str(), 0660) != 0) {
    return Status::Internal("cannot set mode 0660 on control socket " + path + ": " + Errno());
  }
  if (options_.socket_group && ::chown(path.c_str(), static_cast<uid_t>(-1), *options_.socket_group) != 0) {
    return Status::Internal("cannot give control socket " + path + " to group " +
                            std::to_string(*options_.socket_group) + ": " + Errno());
  }
  asio::co_spawn(io_, AcceptLoop(accept_), asio::detached);
  spdlog::info("control socket listening on {}", path);
  return Status::Ok();
}

void ControlServer::BeginShutdown() { shutting_down_ = true; }

void ControlServer::Stop() {
  boost::system::error_code ignored;
  accept_->server = nullptr;
  accept_->acceptor.close(ignored);
  auto connections = std::move(connections_);
  connections_.clear();
  for (auto& [raw, connection] : connections) connection->Stop();
  if (listening_) {
    ::unlink(options_.socket_path.c_str());
    listening_ = false;
  }
}

asio::awaitable<void> ControlServer::AcceptLoop(std::shared_ptr<AcceptState> state) {
  AcceptBackoff backoff("control socket");
  for (;;) {
    boost::system::error_code ec;
    Local::socket socket = co_await state->acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (state->server == nullptr || !state->acceptor.is_open()) co_return;
    if (!ec) {
      backoff.Succeeded();
      state->server->OnAccepted(std::move(socket));
      continue;
    }
    // E.g. out of descriptors (EMFILE): the connection stays queued, so
    // retrying at once would spin. Pause and log at most once a second.
    asio::steady_timer pause(state->acceptor.get_executor(), backoff.Failed(ec));
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (state->server == nullptr) co_return;
  }
}

bool ControlServer::Allowed(const PeerCredentials& credentials) const {
  if (options_.allow_uids.empty() && options_.allow_gids.empty()) return true;
  if (credentials.uid == ::geteuid()) return true;
  auto listed = [](const std::vector<uint32_t>& ids, uint32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  if (listed(options_.allow_uids, credentials.uid) || listed(options_.allow_gids, credentials.gid)) return true;
  return std::any_of(credentials.groups.begin(), credentials.groups.end(),
                     [&](uint32_t group) { return listed(options_.allow_gids, group); });
}

namespace {

// The supplementary groups the peer had when it connected (SO_PEERGROUPS,
// Linux 4.13): the kernel's record, not anything the client says. Empty
// when the kernel does not know the option; then only the primary gid
// counts.
std::vector<uint32_t> PeerGroups(int fd) {
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      return std::vector<uint32_t>(groups.begin(), groups.end());
    }
    if (errno != ERANGE) break;
    groups.resize(len / sizeof(gid_t) + 1);  // len says how much is needed
  }
  return {};
}

}  // namespace

void ControlServer::OnAccepted(Local::socket socket) {
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
    spdlog::warn("control connection refused: cannot read its credentials: {}", Errno());
    return;
  }
  const PeerCredentials credentials{peer.pid, peer.uid, peer.gid, PeerGroups(socket.native_handle())};
  if (!Allowed(credentials)) {
    spdlog::warn("control connection from pid {} uid {} gid {} refused: not in the allowlist", peer.pid, peer.uid,
                 peer.gid);
    engines_.counters().Add(Counter::kControlConnectionsRefused);
    return;
  }
  if (options_.max_connections != 0 && connections_.size() >= options_.max_connections) {
    RefuseOverLimit(socket, credentials);
    return;  // `socket` closes here
  }
  spdlog::info("control connection from pid {} uid {} gid {}", peer.pid, peer.uid, peer.gid);
  engines_.counters().Add(Counter::kControlConnections);
  ControlHandler* handler = this;
  auto connection = std::make_shared<ControlConnection>(std::move(socket), credentials, handler);
  connections_[connection.get()] = connection;
  connection->Start();
}

void ControlServer::RefuseOverLimit(Local::socket& socket, const PeerCredentials& credentials) {
  const std::string limit = "max-control-connections (" + std::to_string(options_.max_connections) + ") reached";
  limits_.Hit(&engines_.counters(), Counter::kLimitMaxControlConnections,
              limit + ": refused a control connection from pid " + std::to_string(credentials.pid) + " uid " +
                  std::to_string(credentials.uid));
  const std::string line = Answer(nullptr,
                                  Status::Conflict(limit + ": " + std::to_string(connections_.size()) +
                                                   " control connections are open; retry after one closes"),
                                  {}) +
                           "\n";
  // A fresh socket's send buffer is empty, so one short line fits without
  // blocking; if not, the client just sees the close.
  (void)::send(socket.native_handle(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void ControlServer::OnConnectionClosed(ControlConnection* connection) {
  spdlog::debug("control connection from pid {} closed", connection->credentials().pid);
  connections_.erase(connection);
}

std::string ControlServer::TooLargeResponse() {
  return Answer(nullptr,
                Status::TooLarge("request line longer than " + std::to_string(kMaxControlLineBytes) +
                                 " bytes; closing the connection"),
                {});
}

std::string ControlServer::Answer(const json::value& id, const Status& status, json::object fields) {
  json::object out;
  out["id"] = id;
  if (!status.ok()) {
    engines_.counters().Add(CounterFamily::kControlErrors, ApiErrorIndex(status));
    out["ok"] = false;
    out["error"] = json::object{{"code", ApiErrorCode(status)}, {"message", status.message()}};
  } else {
    out["ok"] = true;
    for (auto& field : fields) out.insert(std::move(field));  // never replaces id or ok
  }
  return json::serialize(out);
}

void ControlServer::AppendAnswer(std::string* out, const json::value& id, const Status& status,
                                 const json::object& fields) {
  if (status.ok()) return AppendOkAnswer(out, id, fields);  // the hot path: no object built
  out->append(Answer(id, status, {}));
  out->push_back('\n');
}

std::optional<asio::awaitable<std::string>> ControlServer::HandleLine(ControlConnection& connection, ControlLine& line,
                                                                      std::string* out) {
  engines_.counters().Add(Counter::kRequests);
  // The previous line's request and answer are gone: reuse their memory.
  json::monotonic_resource& memory = connection.NewParseMemory();
  const json::storage_ptr storage(&memory);
  boost::system::error_code ec;
  json::value parsed = json::parse(line.text, ec, storage);
  if (ec) {
    AppendAnswer(out, nullptr, Status::Invalid("request is not valid JSON: " + ec.message()), {});
    return std::nullopt;
  }
  if (!parsed.is_object()) {
    AppendAnswer(out, nullptr, Status::Invalid("request must be a JSON object, not " + std::string(JsonKind(parsed))),
                 {});
    return std::nullopt;
  }
  const json::object& request = parsed.get_object();
  const json::value* id_field = request.if_contains("id");
  static const json::value kNoId(nullptr);
  const json::value& id = id_field != nullptr ? *id_field : kNoId;
  if (HasNonFiniteNumber(id)) {
    // Out of double range (e.g. 1e999999), even deep inside: echoing it
    // would print a token that is not JSON and break the client's framing.
    AppendAnswer(out, nullptr, Status::Invalid("field 'id' is a number out of range; use a smaller one"), {});
    return std::nullopt;
  }
  const json::value* op = request.if_contains("op");
  if (op == nullptr || !op->is_string()) {
    const std::string problem = op == nullptr ? "is required" : "must be a string, not " + std::string(JsonKind(*op));
    AppendAnswer(out, id, Status::Invalid("field 'op' " + problem), {});
    return std::nullopt;
  }
  // By op for the metrics; ops outside the API share one name, so a client
  // cannot add counters at will.
  const std::string_view op_name = op->get_string();
  engines_.counters().Add(CounterFamily::kControlRequests, ControlRequestLabel(op_name));
  const ControlOp* row = FindControlOp(op_name);
  Status status =
      row == nullptr ? UnknownOp(op_name) : CheckOpAllowed(*row, shutting_down_, connection.engine() != nullptr);
  if (status.ok() && row->privilege != Privilege::kNone) {
    status = options_.access.Check(connection.credentials(), row->privilege, "op '" + std::string(op_name) + "'");
    if (!status.ok()) {
      engines_.counters().Add(Counter::kControlRequestsRefusedPolicy);
      spdlog::info("control connection from pid {}: {}", connection.credentials().pid, status.message());
    }
  }
  const bool may_wait = status.ok() && MayWait(*row, request);
  if (may_wait && (row->handler == nullptr || row->waits == WaitRule::kWithSeal)) {
    return AnswerWaiting(connection.shared_from_this(), std::move(parsed), std::move(line), row);
  }
  json::object fields(storage);
  bool must_wait = false;
  if (status.ok()) {
    OpCall call{connection, request, line, connection.engine(), &fields};
    try {
      ControlOpHandlers& handlers = *this;
      status = (handlers.*row->handler)(call);
    } catch (const std::exception& e) {
      status = Status::Internal(std::string("internal error: ") + e.what());
    }
    must_wait = may_wait && call.must_wait && status.ok();
  }
  if (must_wait) {
    // Nothing to answer yet (a poll or lookup with wait_ms): wait for it.
    return AnswerWaiting(connection.shared_from_this(), std::move(parsed), std::move(line), row);
  }
  AppendAnswer(out, id, status, fields);
  return std::nullopt;
}

asio::awaitable<std::string> ControlServer::AnswerWaiting(std::shared_ptr<ControlConnection> connection,
                                                          json::value parsed, ControlLine line, const ControlOp* row) {
  const json::object& request = parsed.get_object();
  json::object fields;
  Status status;
  try {
    OpCall call{*connection, request, line, connection->engine(), &fields};
    ControlOpHandlers& handlers = *this;
    asio::awaitable<Status> answering = (handlers.*row->wait_handler)(call);
    status = co_await std::move(answering);  // connect, poll and lookup wait: touches nothing of the server after
  } catch (const std::exception& e) {
    status = Status::Internal(std::string("internal error: ") + e.what());
  }
  // The server may be gone.
  if (connection->closed()) co_return std::string();
  std::string out;
  const json::value* id = request.if_contains("id");
  AppendAnswer(&out, id != nullptr ? *id : json::value(nullptr), status, fields);
  co_return out;
}

Status ControlServer::NodeStatus(OpCall& call) {
  *call.response = StatusFields();
  return Status::Ok();
}

Status ControlServer::Metrics(OpCall& call) {
  (*call.response)["text"] = MetricsText();
  return Status::Ok();
}

asio::awaitable<Status> ControlServer::Connect(OpCall& call) {
  StatusOr<PeerRequest> request = ParsePeerRequest(call.request);
  if (!request.ok()) co_return request.status();
  const std::string& peer = request->peer;
  PeerService* peers = engines_.peer_service();
  if (peers == nullptr) co_return Status::Internal("the peer side of the daemon is not running");
  // Shared with the callback, which may run after this request is gone.
  struct Wait {
    explicit Wait(asio::any_io_executor executor) : timer(std::move(executor)) {}
    asio::steady_timer timer;
    std::optional<Status> result;
  };
  auto wait = std::make_shared<Wait>(io_.get_executor());
  peers->Connect(peer, [wait](Status status) {
    wait->result = std::move(status);
    wait->timer.cancel();
  });
  if (!wait->result) {
    wait->timer.expires_after(kConnectCeiling);
    boost::system::error_code ec;
    co_await wait->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!wait->result) co_return Status::Unavailable("peer " + peer + " did not become ready in time");
  co_return *wait->result;
}

Status ControlServer::Disconnect(OpCall& call) {
  StatusOr<PeerRequest> request = ParsePeerRequest(call.request);
  if (!request.ok()) return request.status();
  PeerService* peers = engines_.peer_service();
  if (peers == nullptr) return Status::Internal("the peer side of the daemon is not running");
  return peers->Disconnect(request->peer);
}

Status ControlServer::Hello(OpCall& call) {
  ControlConnection& connection = call.connection;
  if (call.engine) {
    return Status::Conflict("this connection already said hello (engine '" + call.engine->client() +
                            "'); one hello per engine session");
  }
  // Only a publisher (or an operator) may fix model settings the config
  // left unset: otherwise any socket user's first hello could set, e.g.,
  // block_len 1 and lock out the real engines (issue 25, finding 5).
  const PeerCredentials& caller = connection.credentials();
  const Status may_fix = options_.access.Holds(caller, Privilege::kOperator)
                             ? Status::Ok()
                             : options_.access.Check(caller, Privilege::kPublisher, "fixing them");
  StatusOr<HelloRequest> request = ParseHello(call.request);
  if (!request.ok()) return request.status();
  StatusOr<std::shared_ptr<EngineSession>> session = engines_.Hello(*request, caller, may_fix);
  if (!session.ok()) return session.status();
  connection.set_engine(std::move(*session));
  (*call.response)["node_id"] = engines_.node_id();
  (*call.response)["version"] = kVersion;
  (*call.response)["wire_version"] = kWireVersion;
  return Status::Ok();
}

// The engine ops below need a hello: CheckOpAllowed has seen call.engine set.
// Each parses its request (request_parsers.h), has the engine session act on
// it and puts the answer into the response's fields.
Status ControlServer::RegisterRegion(OpCall& call) {
  UniqueFd fd = call.line.TakeDescriptor();  // closed here unless mapped
  StatusOr<RegisterRegionRequest> request = ParseRegisterRegion(call.request);
  if (!request.ok()) return request.status();
  StatusOr<EngineSession::RegionAnswer> region = call.engine->RegisterRegion(*request, std::move(fd));
  if (!region.ok()) return region.status();
  (*call.response)["region_id"] = region->region_id;
  (*call.response)["bytes"] = region->bytes;
  return Status::Ok();
}

Status ControlServer::Publish(OpCall& call) {
  StatusOr<PublishRequest> request = ParsePublish(call.request);
  if (!request.ok()) return request.status();
  StatusOr<size_t> published = call.engine->Publish(*request);
  if (!published.ok()) return published.status();
  (*call.response)["published"] = *published;
  return Status::Ok();
}

asio::awaitable<Status> ControlServer::PublishSealed(OpCall& call) {
  StatusOr<PublishRequest> request = ParsePublish(call.request);
  if (!request.ok()) co_return request.status();
  asio::awaitable<StatusOr<size_t>> publishing = call.engine->PublishSealed(std::move(*request));
  StatusOr<size_t> published = co_await std::move(publishing);  // call.engine keeps the session alive
  if (!published.ok()) co_return published.status();
  (*call.response)["published"] = *published;
  co_return Status::Ok();
}

Status ControlServer::Unpublish(OpCall& call) {
  StatusOr<UnpublishRequest> request = ParseUnpublish(call.request);
  if (!request.ok()) return request.status();
  AddUnpublishResult(call.engine->Unpublish(*request), call.response);
  return Status::Ok();
}

Status ControlServer::Lookup(OpCall& call) {
  StatusOr<LookupRequest> request = ParseLookup(call.request);
  if (!request.ok()) return request.status();
  StatusOr<std::optional<EngineSession::ProbeAnswers>> answers = call.engine->LookupNow(*request);
  if (!answers.ok()) return answers.status();
  if (!answers->has_value()) {
    call.must_wait = true;  // LookupWaiting goes on from this pass
    return Status::Ok();
  }
  AddProbeAnswers(**answers, call.response);
  return Status::Ok();
}

asio::awaitable<Status> ControlServer::LookupWaiting(OpCall& call) {
  StatusOr<LookupRequest> request = ParseLookup(call.request);
  if (!request.ok()) co_return request.status();
  asio::awaitable<StatusOr<EngineSession::ProbeAnswers>> looking = call.engine->Lookup(std::move(*request));
  StatusOr<EngineSession::ProbeAnswers> answers = co_await std::move(looking);  // call.engine keeps the session
  if (!answers.ok()) co_return answers.status();
  AddProbeAnswers(*answers, call.response);
  co_return Status::Ok();
}

Status ControlServer::Flush(OpCall& call) {
  StatusOr<size_t> sent = call.engine->Flush();
  if (!sent.ok()) return sent.status();
  (*call.response)["sent"] = *sent;
  return Status::Ok();
}

Status ControlServer::Load(OpCall& call) {
  StatusOr<LoadRequest> request = ParseLoad(call.request);
  if (!request.ok()) return request.status();
  return call.engine->Load(std::move(*request));
}

Status ControlServer::Store(OpCall& call) {
  StatusOr<StoreRequest> request = ParseStore(call.request);
  if (!request.ok()) return request.status();
  return call.engine->Store(std::move(*request));
}

asio::awaitable<Status> ControlServer::StoreSealed(OpCall& call) {
  StatusOr<StoreRequest> request = ParseStore(call.request);
  if (!request.ok()) co_return request.status();
  asio::awaitable<Status> storing = call.engine->StoreSealed(std::move(*request));
  co_return co_await std::move(storing);  // call.engine keeps the session alive while it hashes
}

Status ControlServer::Finish(OpCall& call) {
  StatusOr<FinishRequest> request = ParseFinish(call.request);
  if (!request.ok()) return request.status();
  return call.engine->Finish(*request);
}

Status ControlServer::Poll(OpCall& call) {
  StatusOr<PollRequest> request = ParsePoll(call.request);
  if (!request.ok()) return request.status();
  std::optional<PollReport> report = call.engine->PollNow(*request);
  if (!report) {
    call.must_wait = true;  // nothing to report yet: PollWaiting waits
    return Status::Ok();
  }
  AddPollReport(*report, call.response);
  return Status::Ok();
}

asio::awaitable<Status> ControlServer::PollWaiting(OpCall& call) {
  StatusOr<PollRequest> request = ParsePoll(call.request);
  if (!request.ok()) co_return request.status();
  asio::awaitable<PollReport> polling = call.engine->Poll(*request);
  const PollReport report = co_await std::move(polling);  // call.engine keeps the session alive while it waits
  AddPollReport(report, call.response);
  co_return Status::Ok();
}

json::object ControlServer::StatusFields() const {
  const auto uptime = std::chrono::steady_clock::now() - started_;
  json::object status;
  status["node_id"] = options_.node_id;
  status["listen"] = options_.listen;
  status["version"] = kVersion;
  status["wire_version"] = kWireVersion;
  status["uptime_s"] = std::chrono::duration_cast<std::chrono::seconds>(uptime).count();
  status["config"] = options_.config;
  status["access"] = options_.access.ToJson();
  PeerService* peers = engines_.peer_service();
  status["handshaking"] = peers != nullptr ? peers->Handshaking() : 0;
  status["peers"] = peers != nullptr ? PeersStatusJson(peers->PeerSnapshots()) : json::array();
  status["engines"] = EnginesStatusJson(engines_.EnginesStatus());
  json::object counters;
  for (const auto& [name, value] : engines_.counters().ByName()) counters[name] = value;
  status["counters"] = std::move(counters);
  return status;
}

std::string ControlServer::MetricsText() const {
  const auto uptime = std::chrono::steady_clock::now() - started_;
  PeerService* peers = engines_.peer_service();
  MetricsInput input;
  input.uptime_s = std::chrono::duration_cast<std::chrono::seconds>(uptime).count();
  input.engines = engines_.engine_count();
  input.control_connections = connections_.size();
  input.published_keys = engines_.index().size();
  input.pins = engines_.index().pins_total();
  const EngineRegistry::Totals totals = engines_.EngineTotals();
  input.engine_loads_in_flight = totals.loads_in_flight;
  input.engine_jobs_pending = totals.jobs_pending;
  if (peers != nullptr) input.peers = peers->PeerSnapshots();
  input.counters = &engines_.counters();
  input.peer_service = peers;
  return FormatMetrics(input);
}

}  // namespace kvpeer::daemon
