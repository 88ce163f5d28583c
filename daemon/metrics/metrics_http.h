// MetricsHttpServer: the --metrics-listen listener, a minimal HTTP/1.1
// server for Prometheus to scrape.
//
// GET /metrics (a query string is ignored) answers 200 with the metrics text
// as text/plain; version=0.0.4. Any other path answers 404, any other
// method 405, a malformed request 400, a request head larger than 8 KiB
// 431. A head may end its lines with CR LF or a bare LF (RFC 9112 section
// 2.2). Every response carries Content-Length and Connection: close, and the
// connection is closed after it; a request body is never read. A client
// gets 10 s to send its request head and read the answer. At most 64
// connections are open at once; at the cap a new connection closes the
// oldest one that has not sent a complete request (or, if every one has, the
// oldest), so idle or slowloris sockets can neither hold the daemon's
// resources nor keep a scraper out (docs/security.md, threat table).
//
// Thread-safety: none; runs on the daemon's one io_context.
//
// Lifetime: Stop() (or destruction) closes the listener and every
// connection; coroutines still suspended find the server gone and end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "base/host_port.h"
#include "base/status.h"

namespace kvpeer::daemon {

class MetricsHttpServer {
 public:
  // `render` produces the metrics text for each scrape.
  MetricsHttpServer(boost::asio::io_context& io, HostPort address, std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Resolves and binds the address and starts accepting. On failure says
  // why (naming the address); the server then does nothing.
  Status Start();
  void Stop();
  // The bound address as HOST:PORT (a port 0 listen shows its real port).
  std::string address() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace kvpeer::daemon
