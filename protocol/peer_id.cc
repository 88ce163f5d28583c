#include "protocol/peer_id.h"

#include <algorithm>

#include "base/host_port.h"
#include "protocol/limits.h"

namespace kvpeer::protocol {
namespace {

constexpr std::string_view kShape = "must be HOST:PORT";

bool IsDnsChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

// An IPv4 literal consists of digits and dots, so the DNS-name character
// set already admits it; only a bracketed host needs its own parse.
std::optional<std::string> HostError(std::string_view host) {
  if (host.empty()) return std::string(kShape) + "; HOST is empty";
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::string(kShape) + "; an IPv6 HOST needs both brackets";
    if (!IsIpv6Address(host.substr(1, host.size() - 2))) {
      return std::string(kShape) + "; the bracketed HOST is not an IPv6 address";
    }
    return std::nullopt;
  }
  if (!std::all_of(host.begin(), host.end(), IsDnsChar)) {
    return std::string(kShape) + "; HOST may hold only letters, digits, '-' and '.' (or be a bracketed IPv6 address)";
  }
  return std::nullopt;
}

std::optional<std::string> PortError(std::string_view port) {
  const std::string rule = std::string(kShape) + "; PORT must be decimal 1 ..= 65535 without leading zeros";
  if (port.size() > 5 || !ParsePort(port)) return rule;
  if (port.front() == '0') return rule;  // "0" itself is out of range too
  return std::nullopt;
}

}  // namespace

std::optional<std::string> PeerIdSyntaxError(std::string_view text) {
  if (text.size() > kMaxPeerIdChars) {
    return "must be at most " + std::to_string(kMaxPeerIdChars) + " characters, has " + std::to_string(text.size());
  }
  // The last ':' separates the port: an IPv6 host is bracketed, so its own
  // colons all come before it.
  const std::optional<HostPortText> parts = SplitAtLastColon(text);
  if (!parts) return std::string(kShape) + "; there is no ':'";
  if (std::optional<std::string> host = HostError(parts->host)) return host;
  return PortError(parts->port);
}

}  // namespace kvpeer::protocol
