#include "daemon/metrics/http_request_head.h"

namespace kvpeer::daemon {

std::optional<size_t> FindHeadEnd(std::string_view received) {
  // Each LF ends a line; the head ends at the LF of the first line that is
  // empty (nothing, or only a CR, since the previous LF).
  for (size_t lf = received.find('\n'); lf != std::string_view::npos; lf = received.find('\n', lf + 1)) {
    size_t next = lf + 1;
    if (next < received.size() && received[next] == '\r') ++next;
    if (next < received.size() && received[next] == '\n') return next + 1;
  }
  return std::nullopt;
}

std::optional<RequestLine> ParseRequestLine(std::string_view head) {
  const size_t end = head.find('\n');
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view line = head.substr(0, end);
  if (line.ends_with('\r')) line.remove_suffix(1);
  const size_t first = line.find(' ');
  if (first == std::string_view::npos) return std::nullopt;
  const size_t second = line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) return std::nullopt;
  RequestLine parsed{line.substr(0, first), line.substr(first + 1, second - first - 1), line.substr(second + 1)};
  if (parsed.method.empty() || parsed.target.empty()) return std::nullopt;
  if (parsed.version != "HTTP/1.1" && parsed.version != "HTTP/1.0") return std::nullopt;
  return parsed;
}

}  // namespace kvpeer::daemon
