#include "daemon/metrics/metrics_http.h"

#include <array>
#include <chrono>
#include <map>
#include <optional>
#include <string_view>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/metrics/accept_backoff.h"
#include "daemon/metrics/http_request_head.h"
#include "daemon/metrics/metrics.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr size_t kMaxRequestHead = 8192;
constexpr auto kRequestTimeout = std::chrono::seconds(10);
constexpr size_t kMaxConnections = 64;

struct Response {
  int status = 200;
  std::string_view reason = "OK";
  std::string_view content_type = "text/plain; charset=utf-8";
  std::string body;
  bool allow_header = false;  // 405 names the allowed methods
};

std::string Serialize(const Response& response, bool head_only) {
  std::string out =
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
                  response.status, response.reason, response.content_type, response.body.size(),
                  response.allow_header ? "Allow: GET, HEAD\r\n" : "");
  if (!head_only) out += response.body;
  return out;
}

Response Error(int status, std::string_view reason) {
  Response response;
  response.status = status;
  response.reason = reason;
  response.body = fmt::format("{} {}\n", status, reason);
  return response;
}

}  // namespace

// One accepted connection. `request_complete` turns true once its request
// head has arrived: from then on it is being answered, not idling.
struct Connection {
  explicit Connection(tcp::socket socket_in) : socket(std::move(socket_in)) {}
  tcp::socket socket;
  bool request_complete = false;
};

struct MetricsHttpServer::State {
  State(asio::io_context& io_in, HostPort address_in, std::function<std::string()> render_in)
      : io(io_in), address(std::move(address_in)), render(std::move(render_in)), acceptor(io_in) {}

  // Static, holding the state in a parameter: the coroutine frames keep it
  // alive from creation on, not only from their first resumption.
  static asio::awaitable<void> AcceptLoop(std::shared_ptr<State> self);
  static asio::awaitable<void> Serve(std::shared_ptr<State> self, uint64_t id, std::shared_ptr<Connection> connection);
  static asio::awaitable<std::optional<Response>> ReadRequest(std::shared_ptr<State> self, Connection& connection,
                                                              bool* head_only);
  Response Answer(std::string_view head) const;
  static void Admit(const std::shared_ptr<State>& self, tcp::socket socket);
  void ShedOne();

  asio::io_context& io;
  HostPort address;
  std::function<std::string()> render;
  tcp::acceptor acceptor;
  // By accept order (the key counts up), so the first idle entry is the
  // oldest: the one shed when a new connection needs its place.
  std::map<uint64_t, std::shared_ptr<Connection>> connections;
  uint64_t next_id = 0;
  bool stopped = false;
};

Response MetricsHttpServer::State::Answer(std::string_view head) const {
  const std::optional<RequestLine> line = ParseRequestLine(head);
  if (!line) return Error(400, "Bad Request");
  if (line->method != "GET" && line->method != "HEAD") {
    Response response = Error(405, "Method Not Allowed");
    response.allow_header = true;
    return response;
  }
  const std::string_view path = line->target.substr(0, line->target.find('?'));
  if (path != "/metrics") return Error(404, "Not Found");
  Response response;
  response.content_type = metrics::kContentType;
  response.body = render();
  return response;
}

// Reads until the head is complete; the response to send, or nullopt when
// the client went away, was too slow or was shed (nothing to answer).
asio::awaitable<std::optional<Response>> MetricsHttpServer::State::ReadRequest(std::shared_ptr<State> self,
                                                                               Connection& connection,
                                                                               bool* head_only) {
  std::array<char, kMaxRequestHead> head{};
  size_t received = 0;
  for (;;) {
    boost::system::error_code ec;
    const size_t n = co_await connection.socket.async_read_some(
        asio::buffer(head.data() + received, head.size() - received), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || self->stopped || !connection.socket.is_open()) co_return std::nullopt;
    received += n;
    const std::string_view view(head.data(), received);
    if (std::optional<size_t> end = FindHeadEnd(view)) {
      connection.request_complete = true;
      *head_only = view.starts_with("HEAD ");
      co_return self->Answer(view.substr(0, *end));
    }
    if (received == head.size()) {
      connection.request_complete = true;
      co_return Error(431, "Request Header Fields Too Large");
    }
  }
}

asio::awaitable<void> MetricsHttpServer::State::Serve(std::shared_ptr<State> self, uint64_t id,
                                                      std::shared_ptr<Connection> connection) {
  asio::steady_timer deadline(self->io, kRequestTimeout);
  deadline.async_wait([connection](boost::system::error_code ec) {
    if (!ec) {
      boost::system::error_code ignored;
      connection->socket.close(ignored);
    }
  });
  bool head_only = false;
  const std::optional<Response> response = co_await ReadRequest(self, *connection, &head_only);
  if (response && !self->stopped && connection->socket.is_open()) {
    const std::string bytes = Serialize(*response, head_only);
    boost::system::error_code ec;
    co_await asio::async_write(connection->socket, asio::buffer(bytes), asio::redirect_error(asio::use_awaitable, ec));
    connection->socket.shutdown(tcp::socket::shutdown_both, ec);
  }
  deadline.cancel();
  boost::system::error_code ignored;
  connection->socket.close(ignored);
  self->connections.erase(id);
}

// At the cap, a new connection takes the place of the oldest one that has
// not sent a complete request (an idle or slowloris socket), or failing
// that of the oldest of all: whoever holds every place, a scraper that
// connects and asks at once is answered. (Refusing the new one instead let
// 64 idle sockets, refilled as they closed, fail every scrape.)
void MetricsHttpServer::State::ShedOne() {
  auto victim = connections.begin();
  for (auto it = connections.begin(); it != connections.end(); ++it) {
    if (!it->second->request_complete) {
      victim = it;
      break;
    }
  }
  spdlog::debug("metrics listener: {} connections open; closing the oldest {}", connections.size(),
                victim->second->request_complete ? "one" : "one without a complete request");
  boost::system::error_code ignored;
  victim->second->socket.close(ignored);  // its Serve ends on the error
  connections.erase(victim);
}

void MetricsHttpServer::State::Admit(const std::shared_ptr<State>& self, tcp::socket socket) {
  if (self->connections.size() >= kMaxConnections) self->ShedOne();
  const uint64_t id = self->next_id++;
  auto connection = std::make_shared<Connection>(std::move(socket));
  self->connections.emplace(id, connection);
  asio::co_spawn(self->io, Serve(self, id, std::move(connection)), asio::detached);
}

asio::awaitable<void> MetricsHttpServer::State::AcceptLoop(std::shared_ptr<State> self) {
  AcceptBackoff backoff("metrics listener");
  while (!self->stopped) {
    boost::system::error_code ec;
    tcp::socket socket = co_await self->acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (self->stopped) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // E.g. EMFILE: the connection stays queued; pause, log at most once a second.
      asio::steady_timer pause(self->io, backoff.Failed(ec));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    backoff.Succeeded();
    Admit(self, std::move(socket));
  }
}

MetricsHttpServer::MetricsHttpServer(asio::io_context& io, HostPort address, std::function<std::string()> render)
    : state_(std::make_shared<State>(io, std::move(address), std::move(render))) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Status MetricsHttpServer::Start() {
  State& s = *state_;
  const std::string name = FormatHostPort(s.address);
  boost::system::error_code ec;
  tcp::resolver resolver(s.io);
  auto endpoints = resolver.resolve(s.address.host, std::to_string(s.address.port),
                                    tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return Status::Unavailable("cannot resolve metrics-listen " + name + ": " + (ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
    return Status::Unavailable("cannot listen on metrics-listen " + name + ": " + ec.message());
  }
  asio::co_spawn(s.io, State::AcceptLoop(state_), asio::detached);
  spdlog::info("metrics listening on http://{}/metrics", address());
  return Status::Ok();
}

void MetricsHttpServer::Stop() {
  State& s = *state_;
  s.stopped = true;
  boost::system::error_code ignored;
  s.acceptor.close(ignored);
  for (const auto& [id, connection] : s.connections) connection->socket.close(ignored);
  s.connections.clear();
}

std::string MetricsHttpServer::address() const {
  boost::system::error_code ec;
  const tcp::endpoint endpoint = state_->acceptor.local_endpoint(ec);
  if (ec) return FormatHostPort(state_->address);
  return FormatHostPort({endpoint.address().to_string(), endpoint.port()});
}

}  // namespace kvpeer::daemon
