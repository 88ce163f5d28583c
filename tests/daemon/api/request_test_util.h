// Helpers of the request parser tests: a request object from JSON text, and
// the API error code a parse answers ("ok" on success). The tests assert
// codes, never message text (docs/control-api.md: clients branch on `code`).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include "base/status_or.h"
#include "daemon/api/api_error.h"

namespace kvpeer::daemon::testing {

inline boost::json::object Request(std::string_view text) { return boost::json::parse(text).as_object(); }

template <typename T>
std::string CodeOf(const StatusOr<T>& parsed) {
  return parsed.ok() ? "ok" : std::string(ApiErrorCode(parsed.status()));
}

// A string of `chars` characters (ASCII).
inline std::string Chars(size_t chars) { return std::string(chars, 'a'); }

// `count` keys of `bytes` bytes each, as lowercase hex.
inline boost::json::array HexKeys(size_t count, size_t bytes = 2) {
  boost::json::array keys;
  keys.reserve(count);
  for (size_t i = 0; i < count; ++i) keys.emplace_back(std::string(2 * bytes, '0'));
  return keys;
}

inline boost::json::array BlockIds(size_t count) {
  boost::json::array ids;
  ids.reserve(count);
  for (size_t i = 0; i < count; ++i) ids.emplace_back(i);
  return ids;
}

}  // namespace kvpeer::daemon::testing
