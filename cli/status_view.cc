#include "cli/status_view.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "config/printable.h"

namespace kvpeer::cli {
namespace {

namespace json = boost::json;

using Row = std::vector<std::string>;

const json::value* Field(const json::object& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->value();
}

// 2^64 as a double (exact): the first value a uint64 cannot hold.
constexpr double kTwoTo64 = 18446744073709551616.0;

// Converting a double outside [0, 2^64) (or NaN) to uint64 is undefined
// behaviour; the daemon's answer is input, so such numbers are no count
// and the caller shows their JSON text instead.
std::optional<uint64_t> AsCount(const json::value* value) {
  if (value == nullptr) return std::nullopt;
  if (value->is_uint64()) return value->as_uint64();
  if (value->is_int64() && value->as_int64() >= 0) return static_cast<uint64_t>(value->as_int64());
  if (value->is_double()) {
    double number = value->as_double();
    if (std::isfinite(number) && number >= 0 && number < kTwoTo64) return static_cast<uint64_t>(number);
  }
  return std::nullopt;
}

std::string Text(const json::value* value) {
  if (value == nullptr || value->is_null()) return "-";
  // Peer ids, reasons and client names come from peers and engines:
  // control characters are escaped so they cannot drive the terminal.
  if (value->is_string()) return config::Printable(value->as_string());
  return json::serialize(*value);
}

std::string Bytes(const json::value* value) {
  std::optional<uint64_t> count = AsCount(value);
  return count ? FormatBytes(*count) : Text(value);
}

std::string Duration(const json::value* value) {
  std::optional<uint64_t> seconds = AsCount(value);
  return seconds ? FormatDuration(*seconds) : Text(value);
}

// Prints rows under headers, each column as wide as its widest cell; the
// last column is not padded so long last_error texts do not pad lines.
void PrintTable(const Row& headers, const std::vector<Row>& rows, std::ostream& out) {
  std::vector<size_t> widths(headers.size());
  for (size_t c = 0; c < headers.size(); ++c) {
    widths[c] = headers[c].size();
    for (const Row& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  auto print_row = [&](const Row& row) {
    for (size_t c = 0; c < row.size(); ++c) {
      out << row[c];
      if (c + 1 < row.size()) out << std::string(widths[c] - row[c].size() + 2, ' ');
    }
    out << "\n";
  };
  print_row(headers);
  for (const Row& row : rows) print_row(row);
}

const json::array* ArrayField(const json::object& status, const char* key) {
  const json::value* value = Field(status, key);
  return value != nullptr && value->is_array() ? &value->as_array() : nullptr;
}

Row PeerRow(const json::object& peer) {
  return {
      Text(Field(peer, "peer_id")),         Text(Field(peer, "state")),          Text(Field(peer, "since")),
      Text(Field(peer, "rtt_us")),          Bytes(Field(peer, "bytes_sent")),    Bytes(Field(peer, "bytes_received")),
      Text(Field(peer, "loads_in_flight")), Text(Field(peer, "rounds_serving")), Text(Field(peer, "last_error"))};
}

Row EngineRow(const json::object& engine) {
  return {Text(Field(engine, "client")), Text(Field(engine, "pid")), Text(Field(engine, "num_blocks")),
          Text(Field(engine, "published")), Text(Field(engine, "loads_in_flight"))};
}

// Rows of every object element of status[key], via `to_row`.
std::vector<Row> ObjectRows(const json::object& status, const char* key, Row (*to_row)(const json::object&)) {
  std::vector<Row> rows;
  if (const json::array* items = ArrayField(status, key)) {
    for (const json::value& item : *items) {
      if (item.is_object()) rows.push_back(to_row(item.as_object()));
    }
  }
  return rows;
}

// A user or group id with its local name when this machine knows it:
// "991 (kvpeer-publishers)".
std::string IdWithName(uint64_t id, bool group) {
  std::string text = std::to_string(id);
  if (id > 0xFFFFFFFEu) return text;
  std::vector<char> buffer(16384);
  const char* name = nullptr;
  struct passwd user {};
  struct passwd* found_user = nullptr;
  struct group entry {};
  struct group* found_group = nullptr;
  if (group) {
    if (::getgrgid_r(static_cast<gid_t>(id), &entry, buffer.data(), buffer.size(), &found_group) == 0 &&
        found_group != nullptr) {
      name = found_group->gr_name;
    }
  } else if (::getpwuid_r(static_cast<uid_t>(id), &user, buffer.data(), buffer.size(), &found_user) == 0 &&
             found_user != nullptr) {
    name = found_user->pw_name;
  }
  if (name != nullptr) text += " (" + config::Printable(name) + ")";
  return text;
}

// "uids 0 (root), 998 (kvpeer); gids 991 (kvpeer-publishers)" from
// status.access.<side>; "-" when the daemon does not report it.
std::string AccessText(const json::object& status, const char* side) {
  const json::value* access = Field(status, "access");
  if (access == nullptr || !access->is_object()) return "-";
  const json::value* granted = Field(access->as_object(), side);
  if (granted == nullptr || !granted->is_object()) return "-";
  const json::value* anyone = Field(granted->as_object(), "anyone");
  if (anyone != nullptr && anyone->is_bool() && anyone->get_bool()) return "any socket user (not configured)";
  std::string text;
  for (const char* kind : {"uids", "gids"}) {
    const json::value* ids = Field(granted->as_object(), kind);
    std::string list;
    if (ids != nullptr && ids->is_array()) {
      for (const json::value& id : ids->as_array()) {
        std::optional<uint64_t> number = AsCount(&id);
        list += (list.empty() ? "" : ", ") + (number ? IdWithName(*number, kind[0] == 'g') : Text(&id));
      }
    }
    text += (text.empty() ? "" : "; ") + std::string(kind) + " " + (list.empty() ? "none" : list);
  }
  return text;
}

void PrintHeader(const json::object& status, std::ostream& out) {
  out << "node     " << Text(Field(status, "node_id")) << "\n"
      << "listen   " << Text(Field(status, "listen")) << "\n"
      << "version  " << Text(Field(status, "version")) << " (wire " << Text(Field(status, "wire_version")) << ")\n"
      << "uptime   " << Duration(Field(status, "uptime_s")) << "\n"
      << "publish  " << AccessText(status, "publishers") << "\n"
      << "operate  " << AccessText(status, "operators") << "\n";
}

void PrintEngines(const json::object& status, std::ostream& out) {
  std::vector<Row> rows = ObjectRows(status, "engines", EngineRow);
  if (rows.empty()) {
    out << "engines: none\n";
    return;
  }
  PrintTable({"CLIENT", "PID", "BLOCKS", "PUBLISHED", "LOADS_IN_FLIGHT"}, rows, out);
}

// A counter that is exactly 0: every counter exists from the daemon's start
// (docs/operations.md, "Metrics"), so most of them are.
bool IsZero(const json::value& value) {
  return (value.is_uint64() && value.get_uint64() == 0) || (value.is_int64() && value.get_int64() == 0) ||
         (value.is_double() && value.get_double() == 0.0);
}

// The counters that are not 0, and how many were left out; `--json` shows
// them all.
void PrintCounters(const json::object& status, std::ostream& out) {
  const json::value* counters = Field(status, "counters");
  if (counters == nullptr || !counters->is_object() || counters->as_object().empty()) {
    out << "counters: none\n";
    return;
  }
  std::vector<Row> rows;
  size_t zeros = 0;
  for (const auto& entry : counters->as_object()) {
    if (IsZero(entry.value())) {
      ++zeros;
      continue;
    }
    rows.push_back({config::Printable(entry.key()), Text(&entry.value())});
  }
  if (rows.empty()) {
    out << "counters: all " << zeros << " at 0 (--json lists them)\n";
    return;
  }
  PrintTable({"COUNTER", "VALUE"}, rows, out);
  if (zeros > 0) out << "(" << zeros << " more at 0; --json lists them)\n";
}

}  // namespace

void PrintPeers(const json::object& status, std::ostream& out) {
  std::vector<Row> rows = ObjectRows(status, "peers", PeerRow);
  if (rows.empty()) {
    out << "peers: none\n";
    return;
  }
  PrintTable({"PEER", "STATE", "SINCE", "RTT_US", "SENT", "RECEIVED", "LOADS", "ROUNDS", "LAST_ERROR"}, rows, out);
}

void PrintStatus(const json::object& status, std::ostream& out) {
  PrintHeader(status, out);
  out << "\n";
  PrintPeers(status, out);
  out << "\n";
  PrintEngines(status, out);
  out << "\n";
  PrintCounters(status, out);
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string FormatDuration(uint64_t seconds) {
  uint64_t days = seconds / 86400, hours = seconds / 3600 % 24, minutes = seconds / 60 % 60, secs = seconds % 60;
  char text[64];
  if (days > 0) {
    std::snprintf(text, sizeof(text), "%llud %02lluh %02llum", static_cast<unsigned long long>(days),
                  static_cast<unsigned long long>(hours), static_cast<unsigned long long>(minutes));
  } else if (hours > 0) {
    std::snprintf(text, sizeof(text), "%lluh %02llum %02llus", static_cast<unsigned long long>(hours),
                  static_cast<unsigned long long>(minutes), static_cast<unsigned long long>(secs));
  } else if (minutes > 0) {
    std::snprintf(text, sizeof(text), "%llum %02llus", static_cast<unsigned long long>(minutes),
                  static_cast<unsigned long long>(secs));
  } else {
    std::snprintf(text, sizeof(text), "%llus", static_cast<unsigned long long>(secs));
  }
  return text;
}

}  // namespace kvpeer::cli
