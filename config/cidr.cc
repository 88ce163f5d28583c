#include "config/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace kvpeer::config {
namespace {

constexpr std::array<uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool IsMapped(const IpAddress& address) {
  return address.family == IpAddress::Family::kV6 &&
         std::equal(kMappedPrefix.begin(), kMappedPrefix.end(), address.bytes.begin());
}

IpAddress Mapped(const IpAddress& v4) {
  IpAddress v6{IpAddress::Family::kV6, {}};
  std::copy(kMappedPrefix.begin(), kMappedPrefix.end(), v6.bytes.begin());
  std::copy_n(v4.bytes.begin(), 4, v6.bytes.begin() + 12);
  return v6;
}

// True if the first `bits` bits of a and b are equal.
bool PrefixEqual(const std::array<uint8_t, 16>& a, const std::array<uint8_t, 16>& b, int bits) {
  int whole = bits / 8;
  if (!std::equal(a.begin(), a.begin() + whole, b.begin())) return false;
  int rest = bits % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

// `address` with every bit past the first `prefix_len` cleared.
IpAddress Masked(const IpAddress& address, int prefix_len) {
  IpAddress out = address;
  for (int bit = prefix_len; bit < address.BitLength(); ++bit) {
    out.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  return out;
}

std::optional<int> ParsePrefix(std::string_view text) {
  if (text.empty() || text.size() > 3) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

}  // namespace

std::optional<IpAddress> IpAddress::Parse(std::string_view text) {
  std::string copy(text);
  IpAddress address;
  if (inet_pton(AF_INET, copy.c_str(), address.bytes.data()) == 1) return address;
  address.family = Family::kV6;
  if (inet_pton(AF_INET6, copy.c_str(), address.bytes.data()) == 1) return address;
  return std::nullopt;
}

std::optional<IpAddress> IpAddress::FromSockaddr(const sockaddr* address) {
  IpAddress out;
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    std::memcpy(out.bytes.data(), &v4->sin_addr, 4);
    return out;
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    out.family = Family::kV6;
    std::memcpy(out.bytes.data(), &v6->sin6_addr, 16);
    return out;
  }
  return std::nullopt;
}

IpAddress IpAddress::Unmapped() const {
  if (!IsMapped(*this)) return *this;
  IpAddress v4;
  std::copy_n(bytes.begin() + 12, 4, v4.bytes.begin());
  return v4;
}

std::string IpAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == Family::kV4 ? AF_INET : AF_INET6, bytes.data(), text, sizeof(text));
  return text;
}

StatusOr<Cidr> Cidr::Parse(std::string_view text) {
  size_t slash = text.find('/');
  std::optional<IpAddress> network = IpAddress::Parse(text.substr(0, slash));
  if (!network) {
    return Status::Invalid("not an IPv4 or IPv6 address before the '/'");
  }
  int prefix_len = network->BitLength();
  if (slash != std::string_view::npos) {
    std::optional<int> parsed = ParsePrefix(text.substr(slash + 1));
    if (!parsed || *parsed > network->BitLength()) {
      return Status::Invalid("prefix length must be 0.." + std::to_string(network->BitLength()) +
                             (network->family == IpAddress::Family::kV4 ? " for IPv4" : " for IPv6"));
    }
    prefix_len = *parsed;
  }
  IpAddress masked = Masked(*network, prefix_len);
  if (masked != *network) {
    // Silently widening "10.0.0.1/8" would allow more than the operator
    // probably meant; say what the block would have to be written as.
    return Status::Invalid("host bits are set; did you mean " + masked.ToString() + "/" + std::to_string(prefix_len) +
                           "?");
  }
  return Cidr(*network, prefix_len);
}

bool Cidr::Contains(const IpAddress& address) const {
  IpAddress plain = address.Unmapped();
  if (plain.family == network_.family) return PrefixEqual(plain.bytes, network_.bytes, prefix_len_);
  if (network_.family == IpAddress::Family::kV6) return PrefixEqual(Mapped(plain).bytes, network_.bytes, prefix_len_);
  return false;
}

std::string Cidr::ToString() const { return network_.ToString() + "/" + std::to_string(prefix_len_); }

bool AllowlistPermits(const std::vector<Cidr>& allowlist, const IpAddress& address) {
  if (allowlist.empty()) return true;
  return std::any_of(allowlist.begin(), allowlist.end(), [&](const Cidr& block) { return block.Contains(address); });
}

}  // namespace kvpeer::config
