// Reading an HTTP/1.x request head for the metrics listener (metrics_http.h):
// where the head ends and what its request line says. Pure: no I/O.
//
// RFC 9112 section 2.2 lets a recipient accept a bare LF as a line end (and
// ignore a CR before it); scrapers and hand-typed requests (`nc`) do send
// bare LFs, so a head ends at the first empty line, whichever line ends it
// uses. Refusing them would hold such a request until the read deadline.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kvpeer::daemon {

// The length of the head at the start of `received` (through the empty line
// that ends it: "\n\n", "\r\n\r\n", "\n\r\n" or "\r\n\n"), or nullopt while
// no empty line has arrived.
std::optional<size_t> FindHeadEnd(std::string_view received);

struct RequestLine {
  std::string_view method;
  std::string_view target;
  std::string_view version;
};

// The request line of `head` ("GET /metrics HTTP/1.1", ended by LF or CR LF),
// or nullopt when it is not METHOD SP TARGET SP HTTP/1.0|HTTP/1.1.
std::optional<RequestLine> ParseRequestLine(std::string_view head);

}  // namespace kvpeer::daemon
