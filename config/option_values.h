// The value checks the option table's rows share (config/option_table.cc):
// whole numbers and seconds within bounds, user and group ids or names.
// Each failure is Status::Invalid naming the value and what is allowed,
// never the option (the caller prefixes "KEY: ").
//
// Thread-safety: free functions without shared state (ParseId asks the
// system's user and group databases, getpwnam_r/getgrnam_r).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/status_or.h"

namespace kvpeer::config {

// 'value', as error messages show a value.
std::string Quoted(std::string_view value);

// An optionally negative decimal integer; nullopt if not one. Values beyond
// int64 clamp so that a range message still names them as too big.
std::optional<int64_t> ParseInteger(std::string_view text);

// A whole number in min..max ("'x' is not a whole number (allowed: ...)",
// "N is out of range (allowed: ...)").
StatusOr<uint64_t> ParseCount(const std::string& raw, int64_t min, int64_t max);

// Whole seconds in min..max; min 0 where 0 turns a timer off.
StatusOr<std::chrono::seconds> ParseSeconds(const std::string& raw, int64_t min, int64_t max);

// A uid or gid: a decimal id, or a user / group name looked up now.
// 4294967295 is (uid_t)-1, "no id" to the kernel, so it is not an id.
StatusOr<uint32_t> ParseId(const std::string& raw, bool group);
StatusOr<std::vector<uint32_t>> ParseIds(const std::vector<std::string>& raw, bool group);

}  // namespace kvpeer::config
