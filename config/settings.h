// kvpeerd settings: every flag of the control API spec's section 5 and our
// own (docs/control-api.md, "8. Command lines"), from one table.
//
// Options() (config/option_table.cc) is the single description of every
// option (name, kind, bounds, default, reloadable, help), in the manner of
// Redis's config table: the command-line parser (config/command_line.cc),
// the config-file reader (config/toml_config.h), --help, --check-config,
// Settings()'s defaults and EffectiveConfigJson() (the `config` object of
// the control API's `status`) are all driven by it, so they cannot
// disagree; tests hold docs/operations.md ("Every key") and
// config/kvpeerd.example.toml to it.
//
// Sources, lowest precedence first: the defaults, the TOML config file
// (--config FILE; keys are the flag names without dashes), the command line.
// A flag replaces the file's value entirely (a repeatable flag such as
// --allow-cidr replaces the file's whole list, it does not append).
//
// Thread-safety: Settings is a plain value. ParseCommandLine and the free
// functions keep no shared state.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "base/host_port.h"
#include "config/cidr.h"
#include "protocol/features.h"

namespace kvpeer::config {

inline constexpr const char* kDefaultSocketPath = "/run/kvpeer/kvpeerd.sock";

// The option values. Every default lives in the option table
// (config/option_table.cc), not here: Settings() applies the table's
// defaults, so a field without one starts empty or unset. node_id, which
// depends on the listen address and the hostname, is derived by
// ParseCommandLine.
struct Settings {
  Settings();

  std::string config_file;          // --config; empty = none
  HostPort listen;                  // --listen
  std::string node_id;              // --node-id, or derived (see node_id_from_listen)
  bool node_id_from_listen = true;  // true: no --node-id; derived from listen
  std::string socket_path;
  // Model settings; nullopt = taken from the first engine `hello`.
  std::optional<uint64_t> block_len;
  std::optional<std::string> config_fingerprint;
  std::optional<std::string> hash_seed;
  std::string psk_file;           // empty = no peer authentication
  std::string psk;                // SECRET: the key read from psk_file; never logged or reported
  std::vector<Cidr> allow_cidrs;  // empty = any peer address
  // Control socket access (docs/control-api.md, "5. Regions, access and
  // descriptor passing"): local users allowed
  // besides the daemon's own uid (both empty = any user who can open the
  // socket file), and the socket file's group (unset = the daemon's).
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
  std::optional<uint32_t> socket_group;
  // Who may do what over the socket (docs/security.md, "Who may publish and
  // operate"): `publish`/`store` and fixing the node's model settings by
  // the first `hello` (publishers), and `connect`/`disconnect`
  // (operators). Root and the daemon's own uid always may; a caller counts
  // as listed when its uid, or its primary or a supplementary group
  // (SO_PEERCRED, SO_PEERGROUPS), is listed. Empty = nobody else.
  std::vector<uint32_t> publisher_uids;
  std::vector<uint32_t> publisher_gids;
  std::vector<uint32_t> operator_uids;
  std::vector<uint32_t> operator_gids;
  // Limits; hitting one is refused with an error naming it and counted as
  // limit_<name> in status.counters.
  uint64_t max_peers = 0;
  uint64_t max_engines = 0;
  uint64_t max_rounds_per_peer = 0;
  uint64_t max_pending_lookups = 0;
  uint64_t max_queued_bytes = 0;
  // Control socket and engine regions (docs/control-api.md, "6. Limits
  // (ours)"); unset max_region_bytes = the machine's physical memory.
  uint64_t max_control_connections = 0;
  std::optional<uint64_t> max_region_bytes;
  // TLS for peer connections (PEM files): all three or none; none = plain
  // TCP. The key file must not be readable by group or others.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  std::chrono::seconds load_timeout{0};
  std::chrono::seconds abort_ack_timeout{0};
  std::chrono::seconds handshake_timeout{0};
  // A peer connection without work for this long is closed and redialled
  // on demand; 0 = never (docs/operations.md, "Idle peer connections").
  // Live: applies to connections made after a reload.
  std::chrono::seconds idle_peer_timeout{0};
  // Server-role round bounds (wire spec section 6; docs/wire-protocol.md,
  // "7.9a Bounded rounds"): a peer's
  // lookup-only round is retired after round_timeout, a disaggregated fetch
  // still unsupplied after unbound_timeout fails, and the keys of one peer
  // connection's open rounds hold at most max_round_key_bytes.
  std::chrono::seconds round_timeout{0};
  std::chrono::seconds unbound_timeout{0};
  uint64_t max_round_key_bytes = 0;
  // Per-engine bounds (docs/security.md, "Engine state is bounded in
  // bytes"): bytes one sealed publish or store may hash, keys one slot may
  // hold, published key bytes (key + 96 each) and open-request bytes (twice
  // the id + 512, per request and per peer it names).
  uint64_t max_seal_bytes = 0;
  uint64_t max_keys_per_slot = 0;
  uint64_t max_published_key_bytes = 0;
  uint64_t max_open_request_bytes = 0;
  // Wire features offered in connect (wire spec section 7;
  // docs/wire-protocol.md, "7.10 Block checksums"). Empty = none (a
  // 1.0-compatible node).
  std::vector<std::string> features;
  std::string log_level;                   // trace, debug, info, warn, error
  std::optional<HostPort> metrics_listen;  // --metrics-listen; unset = no HTTP metrics listener
  // Nothing before authentication (wire spec section 4, item 6): accepted
  // peer connections still handshaking, in all and from one source address;
  // and how long a peer entry with no connection and no work is kept.
  uint64_t max_handshaking = 0;
  uint64_t max_handshaking_per_source = 0;
  std::chrono::seconds peer_reap_after{0};
};

// Where a table row keeps its value in Settings, for the rows whose
// parsing, reporting and live copy follow from their kind.
using CountField = uint64_t Settings::*;
using OptionalCountField = std::optional<uint64_t> Settings::*;
using SecondsField = std::chrono::seconds Settings::*;
using IdsField = std::vector<uint32_t> Settings::*;
using TextField = std::string Settings::*;
using CidrsField = std::vector<Cidr> Settings::*;
using Field =
    std::variant<std::monostate, CountField, OptionalCountField, SecondsField, IdsField, TextField, CidrsField>;

// What shape a value has; decides how a row parses and reports it.
enum class Kind {
  kCount,     // a whole number in min..max (CountField or OptionalCountField)
  kSeconds,   // whole seconds in min..max (SecondsField)
  kUserIds,   // uids or user names, a list (IdsField)
  kGroupIds,  // gids or group names, a list (IdsField)
  kPemFile,   // the path of a PEM file, read once all options are known (TextField)
  kOther,     // its own parse and show functions
};

// One row of the option table (config/option_table.cc), in the manner of
// Redis's src/config.c: name, kind, bounds, default, reloadable, help.
struct OptionSpec {
  std::string_view name = {};          // flag without "--" = config-file key = key in EffectiveConfigJson
  std::string_view value_name = {};    // shown in --help: "HOST:PORT", "N", ...
  std::string_view default_text = {};  // the default, applied by Settings(); empty = unset by default
  // Shown by --help; "{range}" stands for RangeText().
  std::string_view help = {};
  Kind kind = Kind::kOther;
  // Inclusive bounds of a kCount or kSeconds value (and of block-len).
  int64_t min = 0;
  int64_t max = 0;
  bool repeatable = false;     // may be given several times / as a TOML array
  bool in_config_file = true;  // false only for --config itself
  // Changeable while running: SIGHUP re-reads the config file and applies
  // a changed reloadable option at once (CopyLive copies it between
  // Settings); a changed option that is not reloadable is logged as needing
  // a restart.
  bool reloadable = false;
  Field field = {};
  // kOther: validates the raw values (exactly one unless repeatable) and
  // stores them. Fails (kInvalid) saying why the value is wrong, naming the
  // value and what is allowed but not the option ("'x' is not HOST:PORT (...)").
  Status (*parse)(const OptionSpec& row, const std::vector<std::string>& raw, Settings* settings) = nullptr;
  // The effective value, when `field` does not say it. Secrets never appear.
  boost::json::value (*show)(const Settings& settings) = nullptr;
  // The live copy, when `field` does not say it (psk-file copies the key too).
  void (*copy)(const Settings& from, Settings* to) = nullptr;

  // Validates `raw` and stores it in *settings (see `parse`).
  Status apply(const std::vector<std::string>& raw, Settings* settings) const;
  // The effective value for status / --check-config.
  boost::json::value effective(const Settings& settings) const;
  // Copies this option's value from `from` into *to.
  void CopyLive(const Settings& from, Settings* to) const;
  // Whether the row has bounds (min..max).
  bool bounded() const { return max != 0; }
  // The bounds as documented: "1..65536", "4096..2^62" (2^N from 2^40 up).
  std::string RangeText() const;
  // The --help text: `help` with its range and " [default: X]".
  std::string HelpText() const;
};

// The option table, in --help order.
const std::vector<OptionSpec>& Options();

struct ParseResult {
  // Set when the daemon should run with these (validated) settings.
  std::optional<Settings> settings;
  // Otherwise: print `message` (stdout if exit_code is 0, else stderr) and
  // exit with exit_code: 0 for --help, --version and a valid --check-config;
  // 2 for any invalid flag, file or value.
  int exit_code = 0;
  std::string message;
};

// Parses argv (CLI11, plus the config file named by --config), validates
// every option, derives node_id and loads the PSK. Every problem found is
// reported, one per line, as "kvpeerd: KEY: 'VALUE' ... (allowed ...)".
ParseResult ParseCommandLine(int argc, const char* const* argv);

// The effective settings keyed by flag name without dashes; the PSK bytes
// are omitted (psk-file shows the path only).
boost::json::object EffectiveConfigJson(const Settings& settings);

// One option whose value differs between two Settings (a SIGHUP reload).
struct SettingChange {
  std::string name;       // the option, e.g. "log-level"
  std::string old_value;  // effective values for the log: info, ["10.0.0.0/8"], (unset);
  std::string new_value;  // never a secret: a changed key shows as "(key changed)"
  bool live = false;      // OptionSpec::reloadable
};
// The options of the config file whose effective value differs from
// `before` to `after`, in table order. psk-file also differs when only the
// key read from the same file changed. node-id is compared as configured
// (so pass settings as parsed, not with a resolved port 0).
std::vector<SettingChange> DiffSettings(const Settings& before, const Settings& after);
// Copies every reloadable option from `from` into *to.
void ApplyLiveSettings(const Settings& from, Settings* to);

// "hostname:port" for a wildcard listen host, else the listen address.
// nullopt if the hostname cannot be read.
std::optional<std::string> DefaultNodeId(const HostPort& listen);

// The node id to use once the listener is bound: an explicit --node-id as
// is; a derived one with `bound_port`, so "--listen 0.0.0.0:0" yields the
// real port rather than ":0".
std::string ResolveNodeId(const Settings& settings, uint16_t bound_port);

// --max-region-bytes, or the machine's physical memory when unset.
uint64_t EffectiveMaxRegionBytes(const Settings& settings);

}  // namespace kvpeer::config
