// A strict reader for the TOML subset that kvpeerd config files use.
//
// Supported: comments, blank lines, and top-level `key = value` lines whose
// value is a basic string ("..." with TOML escapes), a literal string
// ('...'), an integer, float or boolean (kept as its text; the option's own
// validation judges it), or an array of those (one line or several,
// trailing comma allowed). Tables, inline tables, multi-line strings and
// dotted keys are rejected with a message saying so.
//
// CLI11 ships a lenient reader that cuts values at any '#', even inside
// quotes, and mis-reads empty strings; a key such as config-fingerprint
// must survive byte for byte, hence this reader (plugged into CLI11's
// config support by config/settings.cc).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/status_or.h"

namespace kvpeer::config {

struct TomlEntry {
  std::string key;
  std::vector<std::string> values;  // one for a scalar, any number for an array
  bool is_array = false;
  int line = 0;  // 1-based line of the key
};

// Parses `text` into its entries, in file order. Every key must be in
// `known_keys` and appear once. On failure returns Status::Invalid whose
// message starts "line N: " and says what was expected, e.g. "line 4:
// unknown key 'lisen' (known keys: ...)".
StatusOr<std::vector<TomlEntry>> ParseTomlSubset(std::string_view text,
                                                 const std::set<std::string, std::less<>>& known_keys);

}  // namespace kvpeer::config
