#include "config/settings.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>

#include "config/checked_file.h"
#include "config/psk.h"
#include "config/toml_subset.h"
#include "config/version.h"
#include "protocol/json_fields.h"
#include "protocol/limits.h"
#include "protocol/peer_id.h"

namespace kvpeer::config {
namespace {

namespace json = boost::json;

// ---- Value checks shared by the table rows -------------------------------

std::string Quoted(std::string_view value) { return "'" + std::string(value) + "'"; }

// Parses an optionally negative decimal integer; nullopt if not one. Values
// beyond int64 clamp so that the range message still names them as too big.
std::optional<int64_t> ParseInteger(std::string_view text) {
  std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  (void)end;
  if (error == std::errc::result_out_of_range) return text.starts_with('-') ? INT64_MIN : INT64_MAX;
  return value;
}

// Whole seconds, min..kMaxTimeoutSeconds; min 0 where 0 turns a timer off.
Status ApplySeconds(const std::string& raw, std::chrono::seconds* out, int64_t min = 1) {
  std::optional<int64_t> value = ParseInteger(raw);
  std::string range = std::to_string(min) + ".." + std::to_string(kMaxTimeoutSeconds);
  if (!value) return Status::Invalid(Quoted(raw) + " is not a whole number of seconds (allowed: " + range + ")");
  if (*value < min) {
    return Status::Invalid(raw + " must be " + (min == 0 ? ">= 0" : "> 0") + " (whole seconds, " + range + ")");
  }
  if (*value > kMaxTimeoutSeconds) {
    return Status::Invalid(raw + " must be at most " + std::to_string(kMaxTimeoutSeconds) + " (seconds)");
  }
  *out = std::chrono::seconds(*value);
  return Status::Ok();
}

Status ApplyBoundedString(const std::string& raw, size_t min_len, std::optional<std::string>* out) {
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

json::value PathOrNull(const std::string& path) { return path.empty() ? json::value(nullptr) : json::value(path); }

// ---- The option table ----------------------------------------------------

Status ApplyConfig(const std::vector<std::string>& raw, Settings* s) {
  s->config_file = raw.front();
  return Status::Ok();
}

Status ApplyListen(const std::vector<std::string>& raw, Settings* s) {
  std::optional<HostPort> address = ParseHostPort(raw.front());
  if (!address) return Status::Invalid(Quoted(raw.front()) + " is not HOST:PORT (port 0..65535; IPv6 as [::1]:5710)");
  s->listen = *address;
  return Status::Ok();
}

Status ApplyNodeId(const std::vector<std::string>& raw, Settings* s) {
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

Status ApplySocket(const std::vector<std::string>& raw, Settings* s) {
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

Status ApplyBlockLen(const std::vector<std::string>& raw, Settings* s) {
  std::optional<int64_t> value = ParseInteger(raw.front());
  std::string range = "1.." + std::to_string(protocol::kMaxBlockLen);
  if (!value) return Status::Invalid(Quoted(raw.front()) + " is not a number (allowed: " + range + ")");
  if (*value < 1 || static_cast<uint64_t>(*value) > protocol::kMaxBlockLen) {
    return Status::Invalid(raw.front() + " must be " + range);
  }
  s->block_len = static_cast<uint64_t>(*value);
  return Status::Ok();
}

Status ApplyFingerprint(const std::vector<std::string>& raw, Settings* s) {
  return ApplyBoundedString(raw.front(), 0, &s->config_fingerprint);
}

Status ApplyHashSeed(const std::vector<std::string>& raw, Settings* s) {
  // It travels in connect, where control characters are refused (wire spec section 2).
  if (Status problem = protocol::ControlCharacterProblem(raw.front()); !problem.ok()) return problem;
  return ApplyBoundedString(raw.front(), 1, &s->hash_seed);
}

Status ApplyPskFile(const std::vector<std::string>& raw, Settings* s) {
  if (raw.front().empty()) return Status::Invalid("'' is empty; allowed: the path of a key file");
  s->psk_file = raw.front();  // read and checked once all options are known
  return Status::Ok();
}

Status ApplyAllowCidr(const std::vector<std::string>& raw, Settings* s) {
  for (const std::string& text : raw) {
    StatusOr<Cidr> block = Cidr::Parse(text);
    if (!block.ok()) return Status::Invalid(Quoted(text) + " is not a CIDR (" + block.status().message() + ")");
    s->allow_cidrs.push_back(*block);
  }
  return Status::Ok();
}

Status ApplyLoadTimeout(const std::vector<std::string>& raw, Settings* s) {
  return ApplySeconds(raw.front(), &s->load_timeout);
}

Status ApplyAbortAckTimeout(const std::vector<std::string>& raw, Settings* s) {
  return ApplySeconds(raw.front(), &s->abort_ack_timeout);
}

Status ApplyHandshakeTimeout(const std::vector<std::string>& raw, Settings* s) {
  return ApplySeconds(raw.front(), &s->handshake_timeout);
}

Status ApplyIdlePeerTimeout(const std::vector<std::string>& raw, Settings* s) {
  return ApplySeconds(raw.front(), &s->idle_peer_timeout, /*min=*/0);
}

Status ApplyLogLevel(const std::vector<std::string>& raw, Settings* s) {
  static constexpr std::array<std::string_view, 5> kLevels = {"trace", "debug", "info", "warn", "error"};
  if (std::find(kLevels.begin(), kLevels.end(), raw.front()) == kLevels.end()) {
    return Status::Invalid(Quoted(raw.front()) + " is not one of trace, debug, info, warn, error");
  }
  s->log_level = raw.front();
  return Status::Ok();
}

// A count option: a whole number in min..max.
Status ApplyCount(const std::string& raw, uint64_t min, uint64_t max, uint64_t* out) {
  std::optional<int64_t> value = ParseInteger(raw);
  std::string range = std::to_string(min) + ".." + std::to_string(max);
  if (!value) return Status::Invalid(Quoted(raw) + " is not a whole number (allowed: " + range + ")");
  if (*value < 0 || static_cast<uint64_t>(*value) < min || static_cast<uint64_t>(*value) > max) {
    return Status::Invalid(raw + " is out of range (allowed: " + range + ")");
  }
  *out = static_cast<uint64_t>(*value);
  return Status::Ok();
}

// A uid or gid: a decimal id, or a user / group name looked up now.
// 4294967295 is (uid_t)-1, "no id" to the kernel, so it is not an id.
Status ApplyId(const std::string& raw, bool group, uint32_t* out) {
  constexpr int64_t kMaxId = 4294967294;
  const std::string what = group ? "group" : "user";
  if (raw.empty()) return Status::Invalid("'' is empty; allowed: a numeric id or a " + what + " name");
  if (std::all_of(raw.begin(), raw.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::optional<int64_t> value = ParseInteger(raw);
    if (!value || *value > kMaxId) {
      return Status::Invalid(raw + " is out of range (allowed: 0..4294967294 or a " + what + " name)");
    }
    *out = static_cast<uint32_t>(*value);
    return Status::Ok();
  }
  std::vector<char> buffer(4096);
  for (;;) {
    int rc = 0;
    bool found = false;
    if (group) {
      struct group entry {};
      struct group* result = nullptr;
      rc = ::getgrnam_r(raw.c_str(), &entry, buffer.data(), buffer.size(), &result);
      if (rc == 0 && result != nullptr) *out = result->gr_gid;
      found = rc == 0 && result != nullptr;
    } else {
      struct passwd entry {};
      struct passwd* result = nullptr;
      rc = ::getpwnam_r(raw.c_str(), &entry, buffer.data(), buffer.size(), &result);
      if (rc == 0 && result != nullptr) *out = result->pw_uid;
      found = rc == 0 && result != nullptr;
    }
    if (rc == ERANGE && buffer.size() < (1u << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (found) return Status::Ok();
    return Status::Invalid(Quoted(raw) + " is neither a number nor a known " + what + " name");
  }
}

Status ApplyIds(const std::vector<std::string>& raw, bool group, std::vector<uint32_t>* out) {
  for (const std::string& text : raw) {
    uint32_t id = 0;
    Status why = ApplyId(text, group, &id);
    if (!why.ok()) return why;
    out->push_back(id);
  }
  return Status::Ok();
}

Status ApplyAllowUid(const std::vector<std::string>& raw, Settings* s) { return ApplyIds(raw, false, &s->allow_uids); }

Status ApplyAllowGid(const std::vector<std::string>& raw, Settings* s) { return ApplyIds(raw, true, &s->allow_gids); }

Status ApplyPublisherUid(const std::vector<std::string>& raw, Settings* s) {
  return ApplyIds(raw, false, &s->publisher_uids);
}

Status ApplyPublisherGid(const std::vector<std::string>& raw, Settings* s) {
  return ApplyIds(raw, true, &s->publisher_gids);
}

Status ApplyOperatorUid(const std::vector<std::string>& raw, Settings* s) {
  return ApplyIds(raw, false, &s->operator_uids);
}

Status ApplyOperatorGid(const std::vector<std::string>& raw, Settings* s) {
  return ApplyIds(raw, true, &s->operator_gids);
}

Status ApplySocketGroup(const std::vector<std::string>& raw, Settings* s) {
  uint32_t gid = 0;
  Status why = ApplyId(raw.front(), true, &gid);
  if (why.ok()) s->socket_group = gid;
  return why;
}

Status ApplyMaxPeers(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 1, 65536, &s->max_peers);
}

Status ApplyMaxEngines(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 1, 65536, &s->max_engines);
}

Status ApplyMaxRoundsPerPeer(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 1, 1048576, &s->max_rounds_per_peer);
}

Status ApplyMaxPendingLookups(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 1, 16777216, &s->max_pending_lookups);
}

Status ApplyMaxQueuedBytes(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 65536, 1099511627776, &s->max_queued_bytes);
}

Status ApplyMaxHandshaking(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 1, 65536, &s->max_handshaking);
}

Status ApplyMaxHandshakingPerSource(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 1, 65536, &s->max_handshaking_per_source);
}

Status ApplyPeerReapAfter(const std::vector<std::string>& raw, Settings* s) {
  return ApplySeconds(raw.front(), &s->peer_reap_after);
}

Status ApplyMaxControlConnections(const std::vector<std::string>& raw, Settings* s) {
  return ApplyCount(raw.front(), 1, 65536, &s->max_control_connections);
}

Status ApplyMaxRegionBytes(const std::vector<std::string>& raw, Settings* s) {
  uint64_t bytes = 0;
  Status why = ApplyCount(raw.front(), 4096, uint64_t{1} << 62, &bytes);
  if (why.ok()) s->max_region_bytes = bytes;
  return why;
}

Status ApplyPath(const std::string& raw, std::string* out) {
  if (raw.empty()) return Status::Invalid("'' is empty; allowed: the path of a PEM file");
  *out = raw;  // read and checked once all options are known
  return Status::Ok();
}

Status ApplyTlsCert(const std::vector<std::string>& raw, Settings* s) { return ApplyPath(raw.front(), &s->tls_cert); }

Status ApplyTlsKey(const std::vector<std::string>& raw, Settings* s) { return ApplyPath(raw.front(), &s->tls_key); }

Status ApplyTlsCa(const std::vector<std::string>& raw, Settings* s) { return ApplyPath(raw.front(), &s->tls_ca); }

// A bound on each TLS file: a CA bundle of every public root is ~250 KiB.
constexpr uint64_t kMaxTlsFileBytes = 4 * 1024 * 1024;

// The TLS files go together, are regular files of bounded size, the key is
// the owner's alone and the certificate and CA bundle are writable by the
// owner only (config/checked_file.h). Their contents are checked when the
// daemon builds its TLS context.
void CheckTlsFiles(const Settings& s, std::vector<std::string>* problems) {
  const std::array<std::pair<const char*, const std::string*>, 3> files = {
      {{"tls-cert", &s.tls_cert}, {"tls-key", &s.tls_key}, {"tls-ca", &s.tls_ca}}};
  std::string given;
  std::string missing;
  for (const auto& [name, path] : files) (path->empty() ? missing : given) += std::string(name) + " ";
  if (given.empty()) return;
  if (!missing.empty()) {
    problems->push_back(
        "tls-cert, tls-key, tls-ca: give all three or none (missing: " + missing.substr(0, missing.size() - 1) + ")");
    return;
  }
  for (const auto& [name, path] : files) {
    const FileRule rule = path == &s.tls_key ? SecretFileRule(kMaxTlsFileBytes) : TrustedFileRule(kMaxTlsFileBytes);
    const FileCheck check = ReadCheckedFile(*path, rule, nullptr);
    if (!check.ok()) problems->push_back(std::string(name) + ": " + check.message);
  }
}

json::value IdsJson(const std::vector<uint32_t>& ids) { return json::array(ids.begin(), ids.end()); }

Status ApplyMetricsListen(const std::vector<std::string>& raw, Settings* s) {
  std::optional<HostPort> address = ParseHostPort(raw.front());
  if (!address) return Status::Invalid(Quoted(raw.front()) + " is not HOST:PORT (port 0..65535; IPv6 as [::1]:9464)");
  s->metrics_listen = *address;
  return Status::Ok();
}

// --features: a list of supported feature names (ApplyOptions drops empty
// items, so `--features ""` and `features = []` offer none).
Status ApplyFeatures(const std::vector<std::string>& raw, Settings* s) {
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

json::value FeaturesJson(const Settings& s) {
  json::array names;
  for (const std::string& name : s.features) names.emplace_back(name);
  return names;
}

json::value AllowCidrJson(const Settings& s) {
  json::array blocks;
  for (const Cidr& block : s.allow_cidrs) blocks.emplace_back(block.ToString());
  return blocks;
}

std::vector<OptionSpec> BuildOptions() {
  std::vector<OptionSpec> options;
  options.push_back({.name = "config",
                     .value_name = "FILE",
                     .help = "TOML config file; keys are these flag names without dashes",
                     .in_config_file = false,
                     .apply = ApplyConfig,
                     .effective = [](const Settings& s) { return PathOrNull(s.config_file); }});
  options.push_back({.name = "listen",
                     .value_name = "HOST:PORT",
                     .default_text = "0.0.0.0:5710",
                     .help = "TCP address for peers (port 0 picks a free port, shown by status)",
                     .apply = ApplyListen,
                     .effective = [](const Settings& s) { return json::value(FormatHostPort(s.listen)); }});
  options.push_back({.name = "node-id",
                     .value_name = "HOST:PORT",
                     .help = "this node's name on the wire (default: the listen address; for a wildcard host, "
                             "this machine's hostname with the listen port)",
                     .apply = ApplyNodeId,
                     .effective = [](const Settings& s) { return json::value(s.node_id); }});
  options.push_back({.name = "socket",
                     .value_name = "PATH",
                     .default_text = kDefaultSocketPath,
                     .help = "control socket",
                     .apply = ApplySocket,
                     .effective = [](const Settings& s) { return json::value(s.socket_path); }});
  options.push_back(
      {.name = "block-len",
       .value_name = "N",
       .help = "bytes per KV block, 1..67108864 (default: from the first engine hello)",
       .apply = ApplyBlockLen,
       .effective = [](const Settings& s) { return s.block_len ? json::value(*s.block_len) : json::value(nullptr); }});
  options.push_back({.name = "config-fingerprint",
                     .value_name = "S",
                     .help = "model config fingerprint (default: from the first engine hello)",
                     .apply = ApplyFingerprint,
                     .effective = [](const Settings& s) { return OptionalString(s.config_fingerprint); }});
  options.push_back({.name = "hash-seed",
                     .value_name = "S",
                     .help = "block hash seed (default: from the first engine hello)",
                     .apply = ApplyHashSeed,
                     .effective = [](const Settings& s) { return OptionalString(s.hash_seed); }});
  options.push_back({.name = "psk-file",
                     .value_name = "FILE",
                     .help = "pre-shared key for peer authentication; owner-only file, >= 32 bytes",
                     .live = true,
                     .copy_live =
                         [](const Settings& from, Settings* to) {
                           to->psk_file = from.psk_file;
                           to->psk = from.psk;
                         },
                     .apply = ApplyPskFile,
                     .effective = [](const Settings& s) { return PathOrNull(s.psk_file); }});
  options.push_back({.name = "allow-cidr",
                     .value_name = "CIDR",
                     .help = "peer addresses allowed to connect; repeatable or comma-separated (default: any)",
                     .repeatable = true,
                     .live = true,
                     .copy_live = [](const Settings& from, Settings* to) { to->allow_cidrs = from.allow_cidrs; },
                     .apply = ApplyAllowCidr,
                     .effective = AllowCidrJson});
  options.push_back({.name = "allow-uid",
                     .value_name = "UID|USER",
                     .help = "local users allowed on the control socket besides the daemon's own; repeatable or "
                             "comma-separated (default: anyone who can open the socket file)",
                     .repeatable = true,
                     .apply = ApplyAllowUid,
                     .effective = [](const Settings& s) { return IdsJson(s.allow_uids); }});
  options.push_back({.name = "allow-gid",
                     .value_name = "GID|GROUP",
                     .help = "local groups (a client's primary or supplementary group) allowed on the control socket; "
                             "repeatable or comma-separated (default: as allow-uid)",
                     .repeatable = true,
                     .apply = ApplyAllowGid,
                     .effective = [](const Settings& s) { return IdsJson(s.allow_gids); }});
  options.push_back({.name = "socket-group",
                     .value_name = "GID|GROUP",
                     .help = "group owning the control socket file, mode 0660 (default: the daemon's group)",
                     .apply = ApplySocketGroup,
                     .effective = [](const Settings& s) {
                       return s.socket_group ? json::value(*s.socket_group) : json::value(nullptr);
                     }});
  // docs/security.md, "Who may publish and operate".
  options.push_back({.name = "publisher-uid",
                     .value_name = "UID|USER",
                     .help = "local users whose engines may publish and store (supply) blocks and fix the node's "
                             "model settings by the first hello, besides root and the daemon's own uid; "
                             "repeatable or comma-separated (default: none, and with publisher-gid unset every "
                             "socket user may)",
                     .repeatable = true,
                     .apply = ApplyPublisherUid,
                     .effective = [](const Settings& s) { return IdsJson(s.publisher_uids); }});
  options.push_back({.name = "publisher-gid",
                     .value_name = "GID|GROUP",
                     .help = "local groups (a client's primary or supplementary group) whose engines may publish "
                             "and store; repeatable or comma-separated (default: none)",
                     .repeatable = true,
                     .apply = ApplyPublisherGid,
                     .effective = [](const Settings& s) { return IdsJson(s.publisher_gids); }});
  options.push_back({.name = "operator-uid",
                     .value_name = "UID|USER",
                     .help =
                         "local users who may connect and disconnect peers, besides root and the daemon's own "
                         "uid; repeatable or comma-separated (default: none, and with operator-gid unset every socket "
                         "user may)",
                     .repeatable = true,
                     .apply = ApplyOperatorUid,
                     .effective = [](const Settings& s) { return IdsJson(s.operator_uids); }});
  options.push_back({.name = "operator-gid",
                     .value_name = "GID|GROUP",
                     .help = "local groups (primary or supplementary) who may connect and disconnect peers; "
                             "repeatable or comma-separated (default: none)",
                     .repeatable = true,
                     .apply = ApplyOperatorGid,
                     .effective = [](const Settings& s) { return IdsJson(s.operator_gids); }});
  options.push_back({.name = "max-peers",
                     .value_name = "N",
                     .default_text = "64",
                     .help = "peer sessions at most, 1..65536; beyond it a dial fails (peer_unavailable) and an "
                             "inbound peer gets disconnect 'too many peers'",
                     .apply = ApplyMaxPeers,
                     .effective = [](const Settings& s) { return json::value(s.max_peers); }});
  options.push_back({.name = "max-engines",
                     .value_name = "N",
                     .default_text = "64",
                     .help = "engine sessions at most, 1..65536; a further hello answers conflict",
                     .apply = ApplyMaxEngines,
                     .effective = [](const Settings& s) { return json::value(s.max_engines); }});
  options.push_back({.name = "max-rounds-per-peer",
                     .value_name = "N",
                     .default_text = "4096",
                     .help = "lookup/fetch rounds served to one peer at once, 1..1048576; beyond it a new round's "
                             "lookup answers all-miss and its fetch fails",
                     .apply = ApplyMaxRoundsPerPeer,
                     .effective = [](const Settings& s) { return json::value(s.max_rounds_per_peer); }});
  options.push_back({.name = "max-pending-lookups",
                     .value_name = "N",
                     .default_text = "65536",
                     .help = "distinct probes of one request's open lookup round, 1..16777216; beyond it lookup "
                             "answers bad_request",
                     .apply = ApplyMaxPendingLookups,
                     .effective = [](const Settings& s) { return json::value(s.max_pending_lookups); }});
  options.push_back({.name = "max-queued-bytes",
                     .value_name = "N",
                     .default_text = "67108864",
                     .help = "bytes waiting to be written on one peer connection, 65536..1099511627776; above it "
                             "the connection stops reading until its queue drains",
                     .apply = ApplyMaxQueuedBytes,
                     .effective = [](const Settings& s) { return json::value(s.max_queued_bytes); }});
  options.push_back({.name = "max-control-connections",
                     .value_name = "N",
                     .default_text = "256",
                     .help = "control-socket connections at once, 1..65536; one beyond gets one conflict line and "
                             "is closed",
                     .apply = ApplyMaxControlConnections,
                     .effective = [](const Settings& s) { return json::value(s.max_control_connections); }});
  options.push_back({.name = "max-region-bytes",
                     .value_name = "N",
                     .help = "bytes of engine regions mapped at once, node-wide, 4096..2^62; a register_region "
                             "beyond it answers conflict (default: the machine's physical memory)",
                     .apply = ApplyMaxRegionBytes,
                     .effective = [](const Settings& s) { return json::value(EffectiveMaxRegionBytes(s)); }});
  options.push_back({.name = "tls-cert",
                     .value_name = "FILE",
                     .help = "TLS 1.3 for peer connections: this node's PEM certificate chain (tls-cert, tls-key "
                             "and tls-ca go together; default: plain TCP)",
                     .apply = ApplyTlsCert,
                     .effective = [](const Settings& s) { return PathOrNull(s.tls_cert); }});
  options.push_back({.name = "tls-key",
                     .value_name = "FILE",
                     .help = "PEM private key of tls-cert; owner-only file",
                     .apply = ApplyTlsKey,
                     .effective = [](const Settings& s) { return PathOrNull(s.tls_key); }});
  options.push_back({.name = "tls-ca",
                     .value_name = "FILE",
                     .help = "PEM CA certificate(s) every peer's certificate must chain to (both directions are "
                             "verified)",
                     .apply = ApplyTlsCa,
                     .effective = [](const Settings& s) { return PathOrNull(s.tls_ca); }});
  options.push_back({.name = "load-timeout-s",
                     .value_name = "S",
                     .default_text = "30",
                     .help = "client-role load timeout, seconds",
                     .apply = ApplyLoadTimeout,
                     .effective = [](const Settings& s) { return json::value(s.load_timeout.count()); }});
  options.push_back({.name = "abort-ack-timeout-s",
                     .value_name = "S",
                     .default_text = "10",
                     .help = "client-role abort-ack timeout, seconds",
                     .apply = ApplyAbortAckTimeout,
                     .effective = [](const Settings& s) { return json::value(s.abort_ack_timeout.count()); }});
  options.push_back({.name = "handshake-timeout-s",
                     .value_name = "S",
                     .default_text = "10",
                     .help = "peer handshake deadline, seconds",
                     .apply = ApplyHandshakeTimeout,
                     .effective = [](const Settings& s) { return json::value(s.handshake_timeout.count()); }});
  // docs/operations.md, "Idle peer connections".
  options.push_back(
      {.name = "idle-peer-timeout-s",
       .value_name = "S",
       .default_text = "300",
       .help = "a peer connection without work for S seconds is closed (disconnect 'idle') and "
               "redialled on the next work, 0..86400; 0 keeps connections forever",
       .live = true,
       .copy_live = [](const Settings& from, Settings* to) { to->idle_peer_timeout = from.idle_peer_timeout; },
       .apply = ApplyIdlePeerTimeout,
       .effective = [](const Settings& s) { return json::value(s.idle_peer_timeout.count()); }});
  // Server-role round bounds (wire-protocol.md section 6, docs/operations.md).
  options.push_back({.name = "round-timeout-s",
                     .value_name = "S",
                     .default_text = "30",
                     .help = "server role: a peer's lookup round with pinned hits and no fetch is retired after S "
                             "seconds, its pins released",
                     .apply = [](const std::vector<std::string>& raw,
                                 Settings* s) { return ApplySeconds(raw.front(), &s->round_timeout); },
                     .effective = [](const Settings& s) { return json::value(s.round_timeout.count()); }});
  options.push_back({.name = "unbound-timeout-s",
                     .value_name = "S",
                     .default_text = "60",
                     .help = "server role: a disaggregated fetch still waiting for store supply after S seconds "
                             "is answered transfer_done false",
                     .apply = [](const std::vector<std::string>& raw,
                                 Settings* s) { return ApplySeconds(raw.front(), &s->unbound_timeout); },
                     .effective = [](const Settings& s) { return json::value(s.unbound_timeout.count()); }});
  options.push_back(
      {.name = "max-round-key-bytes",
       .value_name = "N",
       .default_text = "67108864",
       .help = "server role: key bytes (raw bytes + 128 a key) all open rounds of one peer connection "
               "may hold, 65536..1099511627776; beyond it a lookup answers all-miss, a fetch fails",
       .apply = [](const std::vector<std::string>& raw,
                   Settings* s) { return ApplyCount(raw.front(), 65536, 1099511627776, &s->max_round_key_bytes); },
       .effective = [](const Settings& s) { return json::value(s.max_round_key_bytes); }});
  options.push_back({.name = "max-seal-bytes",
                     .value_name = "N",
                     .default_text = "1073741824",
                     .help = "bytes one sealed publish or store may hash (distinct block ids x block-len), "
                             "4096..2^46; beyond it the request answers conflict",
                     .apply = [](const std::vector<std::string>& raw,
                                 Settings* s) { return ApplyCount(raw.front(), 4096, 1ull << 46, &s->max_seal_bytes); },
                     .effective = [](const Settings& s) { return json::value(s.max_seal_bytes); }});
  options.push_back({.name = "max-keys-per-slot",
                     .value_name = "N",
                     .default_text = "16",
                     .help = "keys one engine may publish at one block id, 1..1024; a publish beyond it answers "
                             "conflict",
                     .apply = [](const std::vector<std::string>& raw,
                                 Settings* s) { return ApplyCount(raw.front(), 1, 1024, &s->max_keys_per_slot); },
                     .effective = [](const Settings& s) { return json::value(s.max_keys_per_slot); }});
  options.push_back(
      {.name = "max-published-key-bytes",
       .value_name = "N",
       .default_text = "268435456",
       .help = "bytes of the keys one engine publishes (key bytes + 96 a key), 65536..2^40; a publish "
               "beyond it answers conflict",
       .apply = [](const std::vector<std::string>& raw,
                   Settings* s) { return ApplyCount(raw.front(), 65536, 1ull << 40, &s->max_published_key_bytes); },
       .effective = [](const Settings& s) { return json::value(s.max_published_key_bytes); }});
  options.push_back(
      {.name = "max-open-request-bytes",
       .value_name = "N",
       .default_text = "33554432",
       .help = "bytes of one engine's unfinished requests (twice the id bytes + 512, per request "
               "and per peer it names), 65536..2^40; a lookup, load or store of a new request beyond "
               "it answers conflict",
       .apply = [](const std::vector<std::string>& raw,
                   Settings* s) { return ApplyCount(raw.front(), 65536, 1ull << 40, &s->max_open_request_bytes); },
       .effective = [](const Settings& s) { return json::value(s.max_open_request_bytes); }});
  options.push_back({.name = "features",
                     .value_name = "LIST",
                     .default_text = "xxh3",
                     .help = "wire features offered to peers, comma-separated (xxh3: per-block checksums); \"\" "
                             "offers none",
                     .repeatable = true,
                     .apply = ApplyFeatures,
                     .effective = FeaturesJson});
  options.push_back({.name = "log-level",
                     .value_name = "LEVEL",
                     .default_text = "info",
                     .help = "trace, debug, info, warn or error",
                     .live = true,
                     .copy_live = [](const Settings& from, Settings* to) { to->log_level = from.log_level; },
                     .apply = ApplyLogLevel,
                     .effective = [](const Settings& s) { return json::value(s.log_level); }});
  options.push_back({.name = "metrics-listen",
                     .value_name = "HOST:PORT",
                     .help = "HTTP address serving GET /metrics (Prometheus text) (default: none, metrics only "
                             "through the control socket)",
                     .apply = ApplyMetricsListen,
                     .effective = [](const Settings& s) {
                       return s.metrics_listen ? json::value(FormatHostPort(*s.metrics_listen)) : json::value(nullptr);
                     }});
  options.push_back({.name = "max-handshaking",
                     .value_name = "N",
                     .default_text = "64",
                     .help = "accepted peer connections still in their handshake at most, 1..65536; one beyond it "
                             "is closed before a byte is read",
                     .apply = ApplyMaxHandshaking,
                     .effective = [](const Settings& s) { return json::value(s.max_handshaking); }});
  options.push_back({.name = "max-handshaking-per-source",
                     .value_name = "N",
                     .default_text = "8",
                     .help = "accepted peer connections still in their handshake from one source address at most, "
                             "1..65536; one beyond it is closed before a byte is read",
                     .apply = ApplyMaxHandshakingPerSource,
                     .effective = [](const Settings& s) { return json::value(s.max_handshaking_per_source); }});
  options.push_back({.name = "peer-reap-after-s",
                     .value_name = "S",
                     .default_text = "60",
                     .help = "a peer entry with no connection and no waiting work is removed (from status and "
                             "metrics) this many seconds after it became idle",
                     .apply = ApplyPeerReapAfter,
                     .effective = [](const Settings& s) { return json::value(s.peer_reap_after.count()); }});
  return options;
}

// ---- CLI11 glue ----------------------------------------------------------

// CLI11's config hook, reading files with the strict TOML subset reader.
class TomlSubsetConfig : public CLI::Config {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::string text(std::istreambuf_iterator<char>(input), {});
    std::vector<TomlEntry> entries;
    Status status = ParseTomlSubset(text, FileKeys(), &entries);
    if (status.ok()) status = CheckArrays(entries);
    if (!status.ok()) throw CLI::ConfigError(status.message());
    std::vector<CLI::ConfigItem> items;
    for (TomlEntry& entry : entries) {
      CLI::ConfigItem item;
      item.name = entry.key;
      item.inputs = std::move(entry.values);
      // CLI11 drops an item without inputs; an empty array is a value (an
      // empty list: `features = []` offers none), given as one empty item
      // that ApplyOptions removes again.
      if (entry.is_array && item.inputs.empty()) item.inputs.emplace_back();
      items.push_back(std::move(item));
    }
    return items;
  }

  // Writing config files is not offered (kvpeerd never calls config_to_str).
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return ""; }

 private:
  static std::set<std::string, std::less<>> FileKeys() {
    std::set<std::string, std::less<>> keys;
    for (const OptionSpec& option : Options()) {
      if (option.in_config_file) keys.emplace(option.name);
    }
    return keys;
  }

  static Status CheckArrays(const std::vector<TomlEntry>& entries) {
    for (const TomlEntry& entry : entries) {
      const OptionSpec& option =
          *std::find_if(Options().begin(), Options().end(), [&](const OptionSpec& o) { return o.name == entry.key; });
      if (entry.is_array && !option.repeatable) {
        return Status::Invalid("line " + std::to_string(entry.line) + ": '" + entry.key +
                               "' takes one value, not an array");
      }
    }
    return Status::Ok();
  }
};

std::string HelpWithDefault(const OptionSpec& option) {
  std::string help(option.help);
  if (!option.default_text.empty()) help += " [default: " + std::string(option.default_text) + "]";
  return help;
}

struct Cli {
  std::unique_ptr<CLI::App> app;
  std::vector<CLI::Option*> options;  // parallel to Options()
  CLI::Option* check_config = nullptr;
};

Cli BuildCli() {
  Cli cli;
  cli.app = std::make_unique<CLI::App>("kvpeerd: per-node KV-cache block transfer daemon", "kvpeerd");
  cli.app->config_formatter(std::make_shared<TomlSubsetConfig>());
  cli.app->allow_config_extras(CLI::config_extras_mode::error);
  for (const OptionSpec& option : Options()) {
    const std::string flag = "--" + std::string(option.name);
    const std::string help = HelpWithDefault(option);
    CLI::Option* added = option.in_config_file ? cli.app->add_option(flag, help) : cli.app->set_config(flag, "", help);
    added->type_name(std::string(option.value_name));
    if (option.repeatable) added->take_all()->delimiter(',');
    cli.options.push_back(added);
  }
  const std::string check_help = "validate the settings and exit: 0 valid, 2 invalid";
  cli.check_config = cli.app->add_flag("--check-config", check_help);
  cli.check_config->configurable(false);
  std::string version = std::string("kvpeerd ") + kVersion + " (wire " + kWireVersion + ")";
  cli.app->set_version_flag("--version", version, "print the version and exit")->configurable(false);
  return cli;
}

std::string ConfigFileName(const Cli& cli) {
  for (size_t i = 0; i < Options().size(); ++i) {
    if (!Options()[i].in_config_file && !cli.options[i]->results().empty()) return cli.options[i]->results().front();
  }
  return "?";
}

// A config file larger than this is not one (a wrong path, e.g. a log).
constexpr uint64_t kMaxConfigFileBytes = 1024 * 1024;

// The config files named on the command line ("--config PATH" or
// "--config=PATH").
std::vector<std::string> ConfigFileArguments(int argc, const char* const* argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--config" && i + 1 < argc) files.emplace_back(argv[i + 1]);
    if (arg.starts_with("--config=")) files.emplace_back(arg.substr(std::string_view("--config=").size()));
  }
  return files;
}

// CLI11 reads the config file with a blocking std::ifstream, on the event
// loop when SIGHUP re-parses, so a FIFO or device put at the path would
// stall the daemon; the file is checked first (config/checked_file.h). A
// file that cannot be opened is left to CLI11, whose error says so. (A swap
// between this check and CLI11's read needs write access to the file's
// directory, i.e. the operator's.)
Status CheckConfigFiles(int argc, const char* const* argv) {
  const FileRule rule{.max_bytes = kMaxConfigFileBytes, .kind = "a config file"};
  for (const std::string& file : ConfigFileArguments(argc, argv)) {
    const FileCheck check = ReadCheckedFile(file, rule, nullptr);
    if (!check.ok() && check.problem != FileProblem::kCannotOpen) {
      return Status::Invalid("kvpeerd: config: " + check.message + "\n");
    }
  }
  return Status::Ok();
}

// A CLI11 parse failure as the message an operator should see.
ParseResult ParseFailure(const Cli& cli, const CLI::ParseError& error) {
  std::string name = error.get_name();
  if (name == "CallForHelp" || name == "CallForAllHelp") return {std::nullopt, 0, cli.app->help()};
  if (name == "CallForVersion") return {std::nullopt, 0, std::string(error.what()) + "\n"};
  std::string file = ConfigFileName(cli);
  if (name == "ConfigError") return {std::nullopt, 2, "kvpeerd: config file '" + file + "': " + error.what() + "\n"};
  if (name == "FileError") {
    std::ifstream probe(file);  // CLI11 does not say why; ask again for errno
    std::string why = probe.good() ? "not readable" : std::strerror(errno);
    return {std::nullopt, 2, "kvpeerd: config: cannot read '" + file + "': " + why + "\n"};
  }
  return {std::nullopt, 2, "kvpeerd: " + std::string(error.what()) + "\nRun 'kvpeerd --help' for the flags.\n"};
}

// Applies every option that was given; returns one line per problem.
std::vector<std::string> ApplyOptions(const Cli& cli, Settings* settings) {
  std::vector<std::string> problems;
  for (size_t i = 0; i < Options().size(); ++i) {
    const OptionSpec& option = Options()[i];
    std::vector<std::string> raw = cli.options[i]->results();
    if (raw.empty()) continue;
    // A list's empty items are no items: `--features ""` and `= []` are empty lists.
    if (option.repeatable) std::erase(raw, std::string());
    Status why = option.apply(raw, settings);
    if (!why.ok()) problems.push_back(std::string(option.name) + ": " + why.message());
  }
  return problems;
}

// Settings that depend on others or on the machine: node id and the PSK.
void Finalize(Settings* settings, std::vector<std::string>* problems) {
  if (settings->node_id_from_listen) {
    std::optional<std::string> id = DefaultNodeId(settings->listen);
    if (id) {
      settings->node_id = *id;
    } else {
      problems->push_back("node-id: cannot derive a default from this machine's hostname; set --node-id HOST:PORT");
    }
  }
  if (!settings->psk_file.empty()) {
    Status status = LoadPsk(settings->psk_file, &settings->psk);
    if (!status.ok()) problems->push_back(status.message());
  }
  CheckTlsFiles(*settings, problems);
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  std::string text;
  for (const std::string& problem : problems) text += "kvpeerd: " + problem + "\n";
  return text;
}

}  // namespace

const std::vector<OptionSpec>& Options() {
  static const std::vector<OptionSpec> kOptions = BuildOptions();
  return kOptions;
}

ParseResult ParseCommandLine(int argc, const char* const* argv) {
  if (Status problem = CheckConfigFiles(argc, argv); !problem.ok()) return {std::nullopt, 2, problem.message()};
  Cli cli = BuildCli();
  try {
    cli.app->parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return ParseFailure(cli, error);
  }
  Settings settings;
  std::vector<std::string> problems = ApplyOptions(cli, &settings);
  if (problems.empty()) Finalize(&settings, &problems);
  if (!problems.empty()) return {std::nullopt, 2, JoinProblems(problems)};
  if (cli.check_config->count() > 0) {
    return {std::nullopt, 0,
            "kvpeerd: configuration is valid\n" + json::serialize(EffectiveConfigJson(settings)) + "\n"};
  }
  return {std::move(settings), 0, ""};
}

boost::json::object EffectiveConfigJson(const Settings& settings) {
  json::object config;
  for (const OptionSpec& option : Options()) config[option.name] = option.effective(settings);
  return config;
}

namespace {

// An effective value as an operator reads it in the log.
std::string ForLog(const json::value& value) {
  if (value.is_null()) return "(unset)";
  if (value.is_string()) return std::string(value.get_string());
  return json::serialize(value);
}

}  // namespace

std::vector<SettingChange> DiffSettings(const Settings& before, const Settings& after) {
  std::vector<SettingChange> changes;
  for (const OptionSpec& option : Options()) {
    if (!option.in_config_file) continue;
    // A node id derived from the listen address changes with it; listen says so.
    if (option.name == "node-id" && before.node_id_from_listen && after.node_id_from_listen) continue;
    const json::value old_value = option.effective(before);
    const json::value new_value = option.effective(after);
    if (old_value != new_value) {
      changes.push_back({std::string(option.name), ForLog(old_value), ForLog(new_value), option.live});
    } else if (option.name == "psk-file" && before.psk != after.psk) {
      changes.push_back(
          {std::string(option.name), ForLog(old_value), ForLog(new_value) + " (key changed)", option.live});
    }
  }
  return changes;
}

void ApplyLiveSettings(const Settings& from, Settings* to) {
  for (const OptionSpec& option : Options()) {
    if (option.live) option.copy_live(from, to);
  }
}

std::optional<std::string> DefaultNodeId(const HostPort& listen) {
  if (!IsWildcardHost(listen.host)) return FormatHostPort(listen);
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return std::nullopt;
  // A hostname that is not a valid HOST would make an unusable peer name.
  if (!protocol::PeerIdSyntaxError(std::string(name) + ":1").ok()) return std::nullopt;
  return FormatHostPort({name, listen.port});
}

uint64_t EffectiveMaxRegionBytes(const Settings& settings) {
  if (settings.max_region_bytes) return *settings.max_region_bytes;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 62;  // unknown: no bound but the kernel's
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

std::string ResolveNodeId(const Settings& settings, uint16_t bound_port) {
  if (!settings.node_id_from_listen) return settings.node_id;
  std::optional<HostPort> id = ParseHostPort(settings.node_id);
  if (!id) return settings.node_id;
  id->port = bound_port;
  return FormatHostPort(*id);
}

}  // namespace kvpeer::config
