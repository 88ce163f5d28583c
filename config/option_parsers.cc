#include "config/option_parsers.h"

#include <sys/un.h>

#include <algorithm>
#include <array>
#include <boost/json/array.hpp>

#include "config/option_values.h"
#include "protocol/json_fields.h"
#include "protocol/peer_id.h"

namespace kvpeer::config::parsers {
namespace {

namespace json = boost::json;

Status BoundedString(const std::string& raw, size_t min_len, std::optional<std::string>* out) {
  if (raw.size() < min_len || raw.size() > protocol::kMaxStringChars) {
    // The value itself is not echoed: hash-seed is not shown to peers either.
    return Status::Invalid("has " + std::to_string(raw.size()) + " characters; allowed: " + std::to_string(min_len) +
                           ".." + std::to_string(protocol::kMaxStringChars));
  }
  *out = raw;
  return Status::Ok();
}

json::value OptionalString(const std::optional<std::string>& value) {
  return value ? json::value(*value) : json::value(nullptr);
}

}  // namespace

Status Config(const OptionSpec&, const Raw& raw, Settings* s) {
  s->config_file = raw.front();
  return Status::Ok();
}

Status Listen(const OptionSpec&, const Raw& raw, Settings* s) {
  std::optional<HostPort> address = ParseHostPort(raw.front());
  if (!address) return Status::Invalid(Quoted(raw.front()) + " is not HOST:PORT (port 0..65535; IPv6 as [::1]:5710)");
  s->listen = *address;
  return Status::Ok();
}

Status NodeId(const OptionSpec&, const Raw& raw, Settings* s) {
  std::optional<HostPort> address = ParseHostPort(raw.front());
  if (!address || address->port == 0) {
    return Status::Invalid(Quoted(raw.front()) + " is not HOST:PORT (port 1..65535; IPv6 as [::1]:5710)");
  }
  // Peers check a peer_id's syntax (wire-protocol.md section 2), so a name
  // they would refuse is refused here, at start, instead.
  if (Status why = protocol::PeerIdSyntaxError(raw.front()); !why.ok()) {
    return Status::Invalid(Quoted(raw.front()) + " is not a valid peer_id: it " + why.message());
  }
  s->node_id = raw.front();
  s->node_id_from_listen = false;
  return Status::Ok();
}

Status Socket(const OptionSpec&, const Raw& raw, Settings* s) {
  const std::string& path = raw.front();
  constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;
  if (path.empty()) return Status::Invalid("'' is empty; allowed: a file path");
  if (path.size() > kMaxPath) {
    return Status::Invalid(Quoted(path) + " is " + std::to_string(path.size()) +
                           " bytes; a Unix socket path is at most " + std::to_string(kMaxPath));
  }
  s->socket_path = path;
  return Status::Ok();
}

Status BlockLen(const OptionSpec& row, const Raw& raw, Settings* s) {
  std::optional<int64_t> value = ParseInteger(raw.front());
  const std::string range = std::to_string(row.min) + ".." + std::to_string(row.max);
  if (!value) return Status::Invalid(Quoted(raw.front()) + " is not a number (allowed: " + range + ")");
  if (*value < row.min || *value > row.max) return Status::Invalid(raw.front() + " must be " + range);
  s->block_len = static_cast<uint64_t>(*value);
  return Status::Ok();
}

Status Fingerprint(const OptionSpec&, const Raw& raw, Settings* s) {
  return BoundedString(raw.front(), 0, &s->config_fingerprint);
}

Status HashSeed(const OptionSpec&, const Raw& raw, Settings* s) {
  // It travels in connect, where control characters are refused (wire spec section 2).
  if (Status problem = protocol::ControlCharacterProblem(raw.front()); !problem.ok()) return problem;
  return BoundedString(raw.front(), 1, &s->hash_seed);
}

Status PskFile(const OptionSpec&, const Raw& raw, Settings* s) {
  if (raw.front().empty()) return Status::Invalid("'' is empty; allowed: the path of a key file");
  s->psk_file = raw.front();  // read and checked once all options are known
  return Status::Ok();
}

Status AllowCidr(const OptionSpec&, const Raw& raw, Settings* s) {
  std::vector<Cidr> blocks;
  for (const std::string& text : raw) {
    StatusOr<Cidr> block = Cidr::Parse(text);
    if (!block.ok()) return Status::Invalid(Quoted(text) + " is not a CIDR (" + block.status().message() + ")");
    blocks.push_back(*block);
  }
  s->allow_cidrs = std::move(blocks);
  return Status::Ok();
}

Status SocketGroup(const OptionSpec&, const Raw& raw, Settings* s) {
  StatusOr<uint32_t> gid = ParseId(raw.front(), /*group=*/true);
  if (!gid.ok()) return gid.status();
  s->socket_group = *gid;
  return Status::Ok();
}

// --features: a list of supported feature names (the parser drops empty
// items, so `--features ""` and `features = []` offer none).
Status Features(const OptionSpec&, const Raw& raw, Settings* s) {
  const std::vector<std::string> supported = protocol::SupportedFeatures();
  std::vector<std::string> chosen;
  for (const std::string& name : raw) {
    if (std::find(supported.begin(), supported.end(), name) == supported.end()) {
      std::string known;
      for (const std::string& feature : supported) known += (known.empty() ? "" : ", ") + feature;
      return Status::Invalid(Quoted(name) + " is not a supported feature (supported: " + known + "; \"\" for none)");
    }
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) chosen.push_back(name);
  }
  s->features = std::move(chosen);
  return Status::Ok();
}

Status LogLevel(const OptionSpec&, const Raw& raw, Settings* s) {
  static constexpr std::array<std::string_view, 5> kLevels = {"trace", "debug", "info", "warn", "error"};
  if (std::find(kLevels.begin(), kLevels.end(), raw.front()) == kLevels.end()) {
    return Status::Invalid(Quoted(raw.front()) + " is not one of trace, debug, info, warn, error");
  }
  s->log_level = raw.front();
  return Status::Ok();
}

Status MetricsListen(const OptionSpec&, const Raw& raw, Settings* s) {
  std::optional<HostPort> address = ParseHostPort(raw.front());
  if (!address) return Status::Invalid(Quoted(raw.front()) + " is not HOST:PORT (port 0..65535; IPv6 as [::1]:9464)");
  s->metrics_listen = *address;
  return Status::Ok();
}

json::value ShowListen(const Settings& s) { return json::value(FormatHostPort(s.listen)); }

json::value ShowNodeId(const Settings& s) { return json::value(s.node_id); }

json::value ShowFingerprint(const Settings& s) { return OptionalString(s.config_fingerprint); }

json::value ShowHashSeed(const Settings& s) { return OptionalString(s.hash_seed); }

json::value ShowSocketGroup(const Settings& s) {
  return s.socket_group ? json::value(*s.socket_group) : json::value(nullptr);
}

json::value ShowFeatures(const Settings& s) {
  json::array names;
  for (const std::string& name : s.features) names.emplace_back(name);
  return names;
}

json::value ShowMetricsListen(const Settings& s) {
  return s.metrics_listen ? json::value(FormatHostPort(*s.metrics_listen)) : json::value(nullptr);
}

json::value ShowMaxRegionBytes(const Settings& s) { return json::value(EffectiveMaxRegionBytes(s)); }

void CopyPsk(const Settings& from, Settings* to) {
  to->psk_file = from.psk_file;
  to->psk = from.psk;
}

}  // namespace kvpeer::config::parsers
