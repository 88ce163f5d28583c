// Settings' defaults from the option table, and what reads the table
// across two Settings: the effective values, their differences and the
// live copy (a SIGHUP reload).
#include "config/settings.h"

#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <cstdlib>

#include "protocol/peer_id.h"

namespace kvpeer::config {

namespace json = boost::json;

Settings::Settings() {
  for (const OptionSpec& option : Options()) {
    if (option.default_text.empty()) continue;
    // A default the row itself refuses is a bug in the table
    // (tests/config/settings_test.cc applies every one).
    if (!option.apply({std::string(option.default_text)}, this).ok()) std::abort();
  }
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
      changes.push_back({std::string(option.name), ForLog(old_value), ForLog(new_value), option.reloadable});
    } else if (option.name == "psk-file" && before.psk != after.psk) {
      changes.push_back(
          {std::string(option.name), ForLog(old_value), ForLog(new_value) + " (key changed)", option.reloadable});
    }
  }
  return changes;
}

void ApplyLiveSettings(const Settings& from, Settings* to) {
  for (const OptionSpec& option : Options()) {
    if (option.reloadable) option.CopyLive(from, to);
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
