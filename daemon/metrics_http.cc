#include "daemon/metrics_http.h"

#include <chrono>
#include <set>
#include <string_view>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/accept_backoff.h"

#include "daemon/metrics.h"

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
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n", response.status,
      response.reason, response.content_type, response.body.size(), response.allow_header ? "Allow: GET, HEAD\r\n" : "");
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

// The request line of `head` ("GET /metrics HTTP/1.1"), split in three.
bool ParseRequestLine(std::string_view head, std::string_view* method, std::string_view* target,
                      std::string_view* version) {
  const size_t end = head.find("\r\n");
  if (end == std::string_view::npos) return false;
  std::string_view line = head.substr(0, end);
  const size_t first = line.find(' ');
  if (first == std::string_view::npos) return false;
  const size_t second = line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) return false;
  *method = line.substr(0, first);
  *target = line.substr(first + 1, second - first - 1);
  *version = line.substr(second + 1);
  return !method->empty() && !target->empty() && (*version == "HTTP/1.1" || *version == "HTTP/1.0");
}

}  // namespace

struct MetricsHttpServer::State {
  State(asio::io_context& io_in, config::HostPort address_in, std::function<std::string()> render_in)
      : io(io_in), address(std::move(address_in)), render(std::move(render_in)), acceptor(io_in) {}

  // Static, holding the state in a parameter: the coroutine frames keep it
  // alive from creation on, not only from their first resumption.
  static asio::awaitable<void> AcceptLoop(std::shared_ptr<State> self);
  static asio::awaitable<void> Serve(std::shared_ptr<State> self, std::shared_ptr<tcp::socket> socket);
  Response Answer(std::string_view head) const;

  asio::io_context& io;
  config::HostPort address;
  std::function<std::string()> render;
  tcp::acceptor acceptor;
  std::set<std::shared_ptr<tcp::socket>> connections;
  bool stopped = false;
};

Response MetricsHttpServer::State::Answer(std::string_view head) const {
  std::string_view method, target, version;
  if (!ParseRequestLine(head, &method, &target, &version)) return Error(400, "Bad Request");
  if (method != "GET" && method != "HEAD") {
    Response response = Error(405, "Method Not Allowed");
    response.allow_header = true;
    return response;
  }
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") return Error(404, "Not Found");
  Response response;
  response.content_type = metrics::kContentType;
  response.body = render();
  return response;
}

asio::awaitable<void> MetricsHttpServer::State::Serve(std::shared_ptr<State> self,
                                                      std::shared_ptr<tcp::socket> socket) {
  asio::steady_timer deadline(self->io, kRequestTimeout);
  deadline.async_wait([socket](boost::system::error_code ec) {
    if (!ec) {
      boost::system::error_code ignored;
      socket->close(ignored);
    }
  });
  asio::streambuf buffer(kMaxRequestHead);
  boost::system::error_code ec;
  size_t n = co_await asio::async_read_until(*socket, buffer, "\r\n\r\n", asio::redirect_error(asio::use_awaitable, ec));
  if (!self->stopped && socket->is_open()) {
    Response response;
    bool head_only = false;
    if (ec == asio::error::not_found) {  // the streambuf's limit: the head is too large
      response = Error(431, "Request Header Fields Too Large");
    } else if (!ec) {
      std::string_view head(static_cast<const char*>(buffer.data().data()), n);
      response = self->Answer(head);
      head_only = head.starts_with("HEAD ");
    }
    if (ec != asio::error::not_found && ec) {
      // The client went away or was too slow: nothing to answer.
    } else {
      const std::string bytes = Serialize(response, head_only);
      co_await asio::async_write(*socket, asio::buffer(bytes), asio::redirect_error(asio::use_awaitable, ec));
      socket->shutdown(tcp::socket::shutdown_both, ec);
    }
  }
  deadline.cancel();
  boost::system::error_code ignored;
  socket->close(ignored);
  self->connections.erase(socket);
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
    if (self->connections.size() >= kMaxConnections) {
      spdlog::debug("metrics listener: {} connections open; closing a new one", self->connections.size());
      continue;  // `socket` closes here
    }
    auto shared = std::make_shared<tcp::socket>(std::move(socket));
    self->connections.insert(shared);
    asio::co_spawn(self->io, Serve(self, shared), asio::detached);
  }
}

MetricsHttpServer::MetricsHttpServer(asio::io_context& io, config::HostPort address,
                                     std::function<std::string()> render)
    : state_(std::make_shared<State>(io, std::move(address), std::move(render))) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

std::string MetricsHttpServer::Start() {
  State& s = *state_;
  const std::string name = config::FormatHostPort(s.address);
  boost::system::error_code ec;
  tcp::resolver resolver(s.io);
  auto endpoints = resolver.resolve(s.address.host, std::to_string(s.address.port),
                                    tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return "cannot resolve metrics-listen " + name + ": " + (ec ? ec.message() : "no address");
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
    return "cannot listen on metrics-listen " + name + ": " + ec.message();
  }
  asio::co_spawn(s.io, State::AcceptLoop(state_), asio::detached);
  spdlog::info("metrics listening on http://{}/metrics", address());
  return "";
}

void MetricsHttpServer::Stop() {
  State& s = *state_;
  s.stopped = true;
  boost::system::error_code ignored;
  s.acceptor.close(ignored);
  for (const auto& socket : std::set<std::shared_ptr<tcp::socket>>(s.connections)) socket->close(ignored);
  s.connections.clear();
}

std::string MetricsHttpServer::address() const {
  boost::system::error_code ec;
  const tcp::endpoint endpoint = state_->acceptor.local_endpoint(ec);
  if (ec) return config::FormatHostPort(state_->address);
  return config::FormatHostPort({endpoint.address().to_string(), endpoint.port()});
}

}  // namespace kvpeer::daemon
