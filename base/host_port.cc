#include "base/host_port.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>

namespace kvpeer {
namespace {

constexpr size_t kMaxPortDigits = 5;

bool IsHostnameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

// "[inner]" -> "inner"; nullopt if `host` is not bracketed around something.
std::optional<std::string_view> Unbracketed(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return std::nullopt;
}

// The host part, brackets removed; nullopt if it is not a valid host.
std::optional<std::string> ParseHost(std::string_view text) {
  if (const std::optional<std::string_view> inner = Unbracketed(text)) {
    if (!IsIpv6Address(*inner)) return std::nullopt;
    return std::string(*inner);
  }
  if (text.empty() || text.size() > kMaxHostnameChars) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), IsHostnameChar)) return std::nullopt;
  return std::string(text);
}

}  // namespace

std::optional<HostPortText> SplitAtLastColon(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  return HostPortText{text.substr(0, colon), text.substr(colon + 1)};
}

// Digits only, so a typo like "5710x" is reported instead of half-parsed.
std::optional<uint16_t> ParsePort(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint32_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint32_t>(c - '0');
    if (value > 65535) return std::nullopt;
  }
  return static_cast<uint16_t>(value);
}

bool IsIpv6Address(std::string_view text) {
  std::array<unsigned char, 16> bytes{};
  return inet_pton(AF_INET6, std::string(text).c_str(), bytes.data()) == 1;
}

std::optional<HostPort> ParseHostPort(std::string_view text) {
  const std::optional<HostPortText> parts = SplitAtLastColon(text);
  if (!parts) return std::nullopt;
  // At most five digits: "0000005710" is a typo to report, not a port.
  if (parts->port.size() > kMaxPortDigits) return std::nullopt;
  std::optional<std::string> host = ParseHost(parts->host);
  const std::optional<uint16_t> port = ParsePort(parts->port);
  if (!host || !port) return std::nullopt;
  return HostPort{std::move(*host), *port};
}

std::optional<HostPort> SplitHostPort(std::string_view text) {
  const std::optional<HostPortText> parts = SplitAtLastColon(text);
  if (!parts || parts->host.empty()) return std::nullopt;
  const std::optional<uint16_t> port = ParsePort(parts->port);
  if (!port) return std::nullopt;
  return HostPort{std::string(Unbracketed(parts->host).value_or(parts->host)), *port};
}

std::string BracketedHost(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return std::string(host);
  return "[" + std::string(host) + "]";
}

std::string FormatHostPort(const HostPort& address) {
  return BracketedHost(address.host) + ":" + std::to_string(address.port);
}

bool IsWildcardHost(std::string_view host) {
  if (host == "0.0.0.0") return true;
  std::array<unsigned char, 16> bytes{};
  if (inet_pton(AF_INET6, std::string(host).c_str(), bytes.data()) != 1) return false;
  return std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0; });
}

}  // namespace kvpeer
