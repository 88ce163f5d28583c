#include "protocol/peer_id.h"

#include <algorithm>
#include <utility>

#include "base/host_port.h"
#include "protocol/limits.h"

namespace kvpeer::protocol {
namespace {

constexpr std::string_view kShape = "must be HOST:PORT";

Status Broke(std::string rule) { return Status::Invalid(std::move(rule)); }

bool IsDnsChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

// An IPv4 literal consists of digits and dots, so the DNS-name character
// set already admits it; only a bracketed host needs its own parse.
Status HostError(std::string_view host) {
  if (host.empty()) return Broke(std::string(kShape) + "; HOST is empty");
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return Broke(std::string(kShape) + "; an IPv6 HOST needs both brackets");
    if (!IsIpv6Address(host.substr(1, host.size() - 2))) {
      return Broke(std::string(kShape) + "; the bracketed HOST is not an IPv6 address");
    }
    return Status::Ok();
  }
  if (!std::all_of(host.begin(), host.end(), IsDnsChar)) {
    return Broke(std::string(kShape) +
                 "; HOST may hold only letters, digits, '-' and '.' (or be a bracketed IPv6 address)");
  }
  return Status::Ok();
}

Status PortError(std::string_view port) {
  const std::string rule = std::string(kShape) + "; PORT must be decimal 1 ..= 65535 without leading zeros";
  if (port.size() > 5 || !ParsePort(port)) return Broke(rule);
  if (port.front() == '0') return Broke(rule);  // "0" itself is out of range too
  return Status::Ok();
}

}  // namespace

Status PeerIdSyntaxError(std::string_view text) {
  if (text.size() > kMaxPeerIdChars) {
    return Broke("must be at most " + std::to_string(kMaxPeerIdChars) + " characters, has " +
                 std::to_string(text.size()));
  }
  // The last ':' separates the port: an IPv6 host is bracketed, so its own
  // colons all come before it.
  const std::optional<HostPortText> parts = SplitAtLastColon(text);
  if (!parts) return Broke(std::string(kShape) + "; there is no ':'");
  if (Status host = HostError(parts->host); !host.ok()) return host;
  return PortError(parts->port);
}

}  // namespace kvpeer::protocol
