#include "config/option_values.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace kvpeer::config {
namespace {

bool AllDigits(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Range(int64_t min, int64_t max) { return std::to_string(min) + ".." + std::to_string(max); }

// The id of user or group `name`; nullopt if there is none. Retries with a
// larger buffer while the entry does not fit (ERANGE).
std::optional<uint32_t> LookUpId(const std::string& name, bool group) {
  std::vector<char> buffer(4096);
  for (;;) {
    int rc = 0;
    std::optional<uint32_t> id;
    if (group) {
      struct group entry {};
      struct group* result = nullptr;
      rc = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &result);
      if (rc == 0 && result != nullptr) id = result->gr_gid;
    } else {
      struct passwd entry {};
      struct passwd* result = nullptr;
      rc = ::getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &result);
      if (rc == 0 && result != nullptr) id = result->pw_uid;
    }
    if (rc != ERANGE || buffer.size() >= (1u << 20)) return id;
    buffer.resize(buffer.size() * 2);
  }
}

}  // namespace

std::string Quoted(std::string_view value) { return "'" + std::string(value) + "'"; }

std::optional<int64_t> ParseInteger(std::string_view text) {
  std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  if (digits.empty() || !AllDigits(digits)) return std::nullopt;
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  (void)end;
  if (error == std::errc::result_out_of_range) return text.starts_with('-') ? INT64_MIN : INT64_MAX;
  return value;
}

StatusOr<uint64_t> ParseCount(const std::string& raw, int64_t min, int64_t max) {
  std::optional<int64_t> value = ParseInteger(raw);
  if (!value) return Status::Invalid(Quoted(raw) + " is not a whole number (allowed: " + Range(min, max) + ")");
  if (*value < min || *value > max) return Status::Invalid(raw + " is out of range (allowed: " + Range(min, max) + ")");
  return static_cast<uint64_t>(*value);
}

StatusOr<std::chrono::seconds> ParseSeconds(const std::string& raw, int64_t min, int64_t max) {
  std::optional<int64_t> value = ParseInteger(raw);
  const std::string range = Range(min, max);
  if (!value) return Status::Invalid(Quoted(raw) + " is not a whole number of seconds (allowed: " + range + ")");
  if (*value < min) {
    const std::string bound = min == 0 ? ">= 0" : min == 1 ? "> 0" : ">= " + std::to_string(min);
    return Status::Invalid(raw + " must be " + bound + " (whole seconds, " + range + ")");
  }
  if (*value > max) return Status::Invalid(raw + " must be at most " + std::to_string(max) + " (seconds)");
  return std::chrono::seconds(*value);
}

StatusOr<uint32_t> ParseId(const std::string& raw, bool group) {
  constexpr int64_t kMaxId = 4294967294;
  const std::string what = group ? "group" : "user";
  if (raw.empty()) return Status::Invalid("'' is empty; allowed: a numeric id or a " + what + " name");
  if (AllDigits(raw)) {
    std::optional<int64_t> value = ParseInteger(raw);
    if (!value || *value > kMaxId) {
      return Status::Invalid(raw + " is out of range (allowed: 0..4294967294 or a " + what + " name)");
    }
    return static_cast<uint32_t>(*value);
  }
  std::optional<uint32_t> id = LookUpId(raw, group);
  if (!id) return Status::Invalid(Quoted(raw) + " is neither a number nor a known " + what + " name");
  return *id;
}

StatusOr<std::vector<uint32_t>> ParseIds(const std::vector<std::string>& raw, bool group) {
  std::vector<uint32_t> ids;
  for (const std::string& text : raw) {
    StatusOr<uint32_t> id = ParseId(text, group);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace kvpeer::config
