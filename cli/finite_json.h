// Makes a parsed control API answer printable as valid JSON.
//
// Boost.JSON parses a number beyond double range (a daemon answering
// 1e999) as an infinite double and serializes it as `Infinity`, which is
// not JSON, so `kvpeerctl --json | jq` would break on such an answer (issue
// 11, finding 5). JSON has no non-finite numbers; null is the one value
// every reader accepts in their place.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace kvpeer::cli {

// Replaces every infinite or NaN number, at any depth, by null. Nothing
// else changes: finite numbers, strings, keys and order stay as they are.
// REQUIRES: nesting bounded, as boost::json::parse bounds it (max_depth 32
// by default); the walk recurses once per level.
void NullNonFinite(boost::json::value& value);
void NullNonFinite(boost::json::object& object);

}  // namespace kvpeer::cli
