// The option table: one row per kvpeerd option, in --help order, each
// stating its kind, bounds, default, whether SIGHUP reloads it, and its
// help, once. The parser, --help, the config-file reader, Settings()'s
// defaults, EffectiveConfigJson and DiffSettings all read these rows;
// tests/config/option_docs_test.cc and example_config_test.cc hold
// docs/operations.md ("Every key") and config/kvpeerd.example.toml to them.
#include "config/option_parsers.h"
#include "config/settings.h"
#include "protocol/limits.h"

namespace kvpeer::config {
namespace {

namespace p = parsers;

// The longest timeout any option takes, a day.
constexpr int64_t kMaxSeconds = 86400;
constexpr int64_t kMaxShortCount = 65536;

std::vector<OptionSpec> AddressAndModelRows() {
  return {
      {.name = "config",
       .value_name = "FILE",
       .help = "TOML config file; keys are these flag names without dashes",
       .in_config_file = false,
       .field = &Settings::config_file,
       .parse = p::Config},
      {.name = "listen",
       .value_name = "HOST:PORT",
       .default_text = "0.0.0.0:5710",
       .help = "TCP address for peers (port 0 picks a free port, shown by status)",
       .parse = p::Listen,
       .show = p::ShowListen},
      {.name = "node-id",
       .value_name = "HOST:PORT",
       .help = "this node's name on the wire (default: the listen address; for a wildcard host, this machine's "
               "hostname with the listen port)",
       .parse = p::NodeId,
       .show = p::ShowNodeId},
      {.name = "socket",
       .value_name = "PATH",
       .default_text = kDefaultSocketPath,
       .help = "control socket",
       .field = &Settings::socket_path,
       .parse = p::Socket},
      {.name = "block-len",
       .value_name = "N",
       .help = "bytes per KV block, {range} (default: from the first engine hello)",
       .min = 1,
       .max = static_cast<int64_t>(protocol::kMaxBlockLen),
       .field = &Settings::block_len,
       .parse = p::BlockLen},
      {.name = "config-fingerprint",
       .value_name = "S",
       .help = "model config fingerprint (default: from the first engine hello)",
       .parse = p::Fingerprint,
       .show = p::ShowFingerprint},
      {.name = "hash-seed",
       .value_name = "S",
       .help = "block hash seed (default: from the first engine hello)",
       .parse = p::HashSeed,
       .show = p::ShowHashSeed},
  };
}

std::vector<OptionSpec> AccessRows() {
  return {
      {.name = "psk-file",
       .value_name = "FILE",
       .help = "pre-shared key for peer authentication; owner-only file, >= 32 bytes",
       .reloadable = true,
       .field = &Settings::psk_file,
       .parse = p::PskFile,
       .copy = p::CopyPsk},
      {.name = "allow-cidr",
       .value_name = "CIDR",
       .help = "peer addresses allowed to connect; repeatable or comma-separated (default: any)",
       .repeatable = true,
       .reloadable = true,
       .field = &Settings::allow_cidrs,
       .parse = p::AllowCidr},
      {.name = "allow-uid",
       .value_name = "UID|USER",
       .help = "local users allowed on the control socket besides the daemon's own; repeatable or comma-separated "
               "(default: anyone who can open the socket file)",
       .kind = Kind::kUserIds,
       .repeatable = true,
       .field = &Settings::allow_uids},
      {.name = "allow-gid",
       .value_name = "GID|GROUP",
       .help = "local groups (a client's primary or supplementary group) allowed on the control socket; "
               "repeatable or comma-separated (default: as allow-uid)",
       .kind = Kind::kGroupIds,
       .repeatable = true,
       .field = &Settings::allow_gids},
      {.name = "socket-group",
       .value_name = "GID|GROUP",
       .help = "group owning the control socket file, mode 0660 (default: the daemon's group)",
       .parse = p::SocketGroup,
       .show = p::ShowSocketGroup},
  };
}

// docs/security.md, "Who may publish and operate".
std::vector<OptionSpec> PrivilegeRows() {
  return {
      {.name = "publisher-uid",
       .value_name = "UID|USER",
       .help = "local users whose engines may publish and store (supply) blocks and fix the node's model settings "
               "by the first hello, besides root and the daemon's own uid; repeatable or comma-separated (default: "
               "none, and with publisher-gid unset every socket user may)",
       .kind = Kind::kUserIds,
       .repeatable = true,
       .field = &Settings::publisher_uids},
      {.name = "publisher-gid",
       .value_name = "GID|GROUP",
       .help = "local groups (a client's primary or supplementary group) whose engines may publish and store; "
               "repeatable or comma-separated (default: none)",
       .kind = Kind::kGroupIds,
       .repeatable = true,
       .field = &Settings::publisher_gids},
      {.name = "operator-uid",
       .value_name = "UID|USER",
       .help = "local users who may connect and disconnect peers, besides root and the daemon's own uid; "
               "repeatable or comma-separated (default: none, and with operator-gid unset every socket user may)",
       .kind = Kind::kUserIds,
       .repeatable = true,
       .field = &Settings::operator_uids},
      {.name = "operator-gid",
       .value_name = "GID|GROUP",
       .help = "local groups (primary or supplementary) who may connect and disconnect peers; repeatable or "
               "comma-separated (default: none)",
       .kind = Kind::kGroupIds,
       .repeatable = true,
       .field = &Settings::operator_gids},
  };
}

// A count row: a whole number in min..max.
OptionSpec Count(std::string_view name, std::string_view default_text, int64_t min, int64_t max, std::string_view help,
                 Field field) {
  return {.name = name,
          .value_name = "N",
          .default_text = default_text,
          .help = help,
          .kind = Kind::kCount,
          .min = min,
          .max = max,
          .field = field};
}

// A timeout row: whole seconds in min..86400.
OptionSpec Seconds(std::string_view name, std::string_view default_text, int64_t min, std::string_view help,
                   SecondsField field) {
  return {.name = name,
          .value_name = "S",
          .default_text = default_text,
          .help = help,
          .kind = Kind::kSeconds,
          .min = min,
          .max = kMaxSeconds,
          .field = field};
}

std::vector<OptionSpec> LimitRows() {
  OptionSpec region = Count("max-region-bytes", "", 4096, int64_t{1} << 62,
                            "bytes of engine regions mapped at once, node-wide, {range}; a register_region beyond it "
                            "answers conflict (default: the machine's physical memory)",
                            &Settings::max_region_bytes);
  region.show = p::ShowMaxRegionBytes;
  return {
      Count("max-peers", "64", 1, kMaxShortCount,
            "peer sessions at most, {range}; beyond it a dial fails (peer_unavailable) and an inbound peer gets "
            "disconnect 'too many peers'",
            &Settings::max_peers),
      Count("max-engines", "64", 1, kMaxShortCount,
            "engine sessions at most, {range}; a further hello answers conflict", &Settings::max_engines),
      Count("max-rounds-per-peer", "4096", 1, 1048576,
            "lookup/fetch rounds served to one peer at once, {range}; beyond it a new round's lookup answers "
            "all-miss and its fetch fails",
            &Settings::max_rounds_per_peer),
      Count("max-pending-lookups", "65536", 1, 16777216,
            "distinct probes of one request's open lookup round, {range}; beyond it lookup answers bad_request",
            &Settings::max_pending_lookups),
      Count("max-queued-bytes", "67108864", 65536, int64_t{1} << 40,
            "bytes waiting to be written on one peer connection, {range}; above it the connection stops reading "
            "until its queue drains",
            &Settings::max_queued_bytes),
      Count("max-control-connections", "256", 1, kMaxShortCount,
            "control-socket connections at once, {range}; one beyond gets one conflict line and is closed",
            &Settings::max_control_connections),
      region,
  };
}

std::vector<OptionSpec> TlsRows() {
  return {
      {.name = "tls-cert",
       .value_name = "FILE",
       .help = "TLS 1.3 for peer connections: this node's PEM certificate chain (tls-cert, tls-key and tls-ca go "
               "together; default: plain TCP)",
       .kind = Kind::kPemFile,
       .field = &Settings::tls_cert},
      {.name = "tls-key",
       .value_name = "FILE",
       .help = "PEM private key of tls-cert; owner-only file",
       .kind = Kind::kPemFile,
       .field = &Settings::tls_key},
      {.name = "tls-ca",
       .value_name = "FILE",
       .help = "PEM CA certificate(s) every peer's certificate must chain to (both directions are verified)",
       .kind = Kind::kPemFile,
       .field = &Settings::tls_ca},
  };
}

std::vector<OptionSpec> TimeoutRows() {
  OptionSpec idle = Seconds("idle-peer-timeout-s", "300", 0,
                            "a peer connection without work for S seconds is closed (disconnect 'idle') and "
                            "redialled on the next work, {range}; 0 keeps connections forever",
                            &Settings::idle_peer_timeout);
  idle.reloadable = true;  // docs/operations.md, "Idle peer connections"
  return {
      Seconds("load-timeout-s", "30", 1, "client-role load timeout, seconds, {range}", &Settings::load_timeout),
      Seconds("abort-ack-timeout-s", "10", 1, "client-role abort-ack timeout, seconds, {range}",
              &Settings::abort_ack_timeout),
      Seconds("handshake-timeout-s", "10", 1, "peer handshake deadline, seconds, {range}",
              &Settings::handshake_timeout),
      idle,
      // Server-role round bounds (wire-protocol.md section 6, docs/operations.md).
      Seconds("round-timeout-s", "30", 1,
              "server role: a peer's lookup round with pinned hits and no fetch is retired after S seconds, its "
              "pins released, {range}",
              &Settings::round_timeout),
      Seconds("unbound-timeout-s", "60", 1,
              "server role: a disaggregated fetch still waiting for store supply after S seconds is answered "
              "transfer_done false, {range}",
              &Settings::unbound_timeout),
  };
}

// Server-role key bytes and per-engine bounds (docs/security.md, "Engine
// state is bounded in bytes").
std::vector<OptionSpec> ByteBoundRows() {
  return {
      Count("max-round-key-bytes", "67108864", 65536, int64_t{1} << 40,
            "server role: key bytes (raw bytes + 128 a key) all open rounds of one peer connection may hold, "
            "{range}; beyond it a lookup answers all-miss, a fetch fails",
            &Settings::max_round_key_bytes),
      Count("max-seal-bytes", "1073741824", 4096, int64_t{1} << 46,
            "bytes one sealed publish or store may hash (distinct block ids x block-len), {range}; beyond it the "
            "request answers conflict",
            &Settings::max_seal_bytes),
      Count("max-keys-per-slot", "16", 1, 1024,
            "keys one engine may publish at one block id, {range}; a publish beyond it answers conflict",
            &Settings::max_keys_per_slot),
      Count("max-published-key-bytes", "268435456", 65536, int64_t{1} << 40,
            "bytes of the keys one engine publishes (key bytes + 96 a key), {range}; a publish beyond it answers "
            "conflict",
            &Settings::max_published_key_bytes),
      Count("max-open-request-bytes", "33554432", 65536, int64_t{1} << 40,
            "bytes of one engine's unfinished requests (twice the id bytes + 512, per request and per peer it "
            "names), {range}; a lookup, load or store of a new request beyond it answers conflict",
            &Settings::max_open_request_bytes),
  };
}

std::vector<OptionSpec> WireAndLogRows() {
  return {
      {.name = "features",
       .value_name = "LIST",
       .default_text = "xxh3",
       .help = "wire features offered to peers, comma-separated (xxh3: per-block checksums); \"\" offers none",
       .repeatable = true,
       .parse = p::Features,
       .show = p::ShowFeatures},
      {.name = "log-level",
       .value_name = "LEVEL",
       .default_text = "info",
       .help = "trace, debug, info, warn or error",
       .reloadable = true,
       .field = &Settings::log_level,
       .parse = p::LogLevel},
      {.name = "metrics-listen",
       .value_name = "HOST:PORT",
       .help = "HTTP address serving GET /metrics (Prometheus text) (default: none, metrics only through the "
               "control socket)",
       .parse = p::MetricsListen,
       .show = p::ShowMetricsListen},
  };
}

// Nothing before authentication (wire spec section 4, item 6).
std::vector<OptionSpec> HandshakeRows() {
  return {
      Count("max-handshaking", "64", 1, kMaxShortCount,
            "accepted peer connections still in their handshake at most, {range}; one beyond it is closed before "
            "a byte is read",
            &Settings::max_handshaking),
      Count("max-handshaking-per-source", "8", 1, kMaxShortCount,
            "accepted peer connections still in their handshake from one source address at most, {range}; one "
            "beyond it is closed before a byte is read",
            &Settings::max_handshaking_per_source),
      Seconds("peer-reap-after-s", "60", 1,
              "a peer entry with no connection and no waiting work is removed (from status and metrics) this many "
              "seconds after it became idle, {range}",
              &Settings::peer_reap_after),
  };
}

std::vector<OptionSpec> BuildOptions() {
  std::vector<OptionSpec> options;
  for (auto rows : {AddressAndModelRows, AccessRows, PrivilegeRows, LimitRows, TlsRows, TimeoutRows, ByteBoundRows,
                    WireAndLogRows, HandshakeRows}) {
    for (OptionSpec& row : rows()) options.push_back(std::move(row));
  }
  return options;
}

}  // namespace

const std::vector<OptionSpec>& Options() {
  static const std::vector<OptionSpec> kOptions = BuildOptions();
  return kOptions;
}

}  // namespace kvpeer::config
