#include "config/host_port.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace kvpeer::config {
namespace {

bool IsHostnameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

bool IsIpv6(std::string_view text) {
  std::array<unsigned char, 16> bytes;
  return inet_pton(AF_INET6, std::string(text).c_str(), bytes.data()) == 1;
}

std::optional<uint16_t> ParsePort(std::string_view text) {
  // Digits only (no sign, no spaces) and at most five of them, so a typo
  // like "5710x" or "0000005710" is reported instead of half-parsed.
  if (text.empty() || text.size() > 5) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  unsigned value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  if (value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

// The host part, brackets removed; nullopt if it is not a valid host.
std::optional<std::string> ParseHost(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    std::string_view inner = text.substr(1, text.size() - 2);
    if (!IsIpv6(inner)) return std::nullopt;
    return std::string(inner);
  }
  if (text.empty() || text.size() > 253) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), IsHostnameChar)) return std::nullopt;
  return std::string(text);
}

}  // namespace

std::optional<HostPort> ParseHostPort(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::optional<std::string> host = ParseHost(text.substr(0, colon));
  std::optional<uint16_t> port = ParsePort(text.substr(colon + 1));
  if (!host || !port) return std::nullopt;
  return HostPort{std::move(*host), *port};
}

std::string FormatHostPort(const HostPort& address) {
  std::string host = address.host.find(':') == std::string::npos ? address.host : "[" + address.host + "]";
  return host + ":" + std::to_string(address.port);
}

bool IsWildcardHost(std::string_view host) {
  if (host == "0.0.0.0") return true;
  std::array<unsigned char, 16> bytes{};
  if (inet_pton(AF_INET6, std::string(host).c_str(), bytes.data()) != 1) return false;
  return std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0; });
}

}  // namespace kvpeer::config
