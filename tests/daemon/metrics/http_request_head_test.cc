// The metrics listener's request-head reading (daemon/metrics/http_request_head.h):
// where a head ends, with CR LF or bare LF line ends, and its request line.
#include <catch2/catch.hpp>

#include <string>

#include "daemon/metrics/http_request_head.h"

namespace kvpeer::daemon {
namespace {

TEST_CASE("a request head ends at its first empty line, whatever ends the lines") {
  const std::string crlf = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(FindHeadEnd(crlf) == crlf.size());
  const std::string lf = "GET /metrics HTTP/1.1\nHost: x\n\n";
  CHECK(FindHeadEnd(lf) == lf.size());
  CHECK(FindHeadEnd("GET /metrics HTTP/1.1\r\n\n") == 24u);
  CHECK(FindHeadEnd("GET /metrics HTTP/1.1\n\r\n") == 24u);
  // What follows the head (a body) is not part of it.
  CHECK(FindHeadEnd("GET / HTTP/1.1\n\nbody") == 16u);
}

TEST_CASE("a request head without an empty line is not complete yet") {
  CHECK_FALSE(FindHeadEnd(""));
  CHECK_FALSE(FindHeadEnd("GET /metrics HTTP/1.1"));
  CHECK_FALSE(FindHeadEnd("GET /metrics HTTP/1.1\r\n"));
  CHECK_FALSE(FindHeadEnd("GET /metrics HTTP/1.1\r\nHost: x\r\n\r"));
  CHECK_FALSE(FindHeadEnd("GET /metrics HTTP/1.1\nHost: x\n"));
}

TEST_CASE("the request line is split in three, with either line end") {
  for (const char* head : {"GET /metrics?x=1 HTTP/1.1\r\n\r\n", "GET /metrics?x=1 HTTP/1.1\n\n"}) {
    const auto line = ParseRequestLine(head);
    REQUIRE(line);
    CHECK(line->method == "GET");
    CHECK(line->target == "/metrics?x=1");
    CHECK(line->version == "HTTP/1.1");
  }
  CHECK(ParseRequestLine("HEAD / HTTP/1.0\n\n"));
}

TEST_CASE("a malformed request line is refused") {
  CHECK_FALSE(ParseRequestLine("nonsense\r\n\r\n"));
  CHECK_FALSE(ParseRequestLine("GET /metrics\r\n\r\n"));
  CHECK_FALSE(ParseRequestLine("GET /metrics HTTP/2\r\n\r\n"));
  CHECK_FALSE(ParseRequestLine("GET  /metrics HTTP/1.1\r\n\r\n"));
  CHECK_FALSE(ParseRequestLine("GET /metrics HTTP/1.1 x\r\n\r\n"));
  CHECK_FALSE(ParseRequestLine("GET /metrics HTTP/1.1"));  // no line end
}

}  // namespace
}  // namespace kvpeer::daemon
