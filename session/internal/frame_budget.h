// FrameBudget: how many header bytes a lookup, lookup_resp or fetch frame
// will take, estimated from above without encoding it, so that the roles can
// split their messages before a frame would exceed the header limit
// (wire-protocol.md section 6, "a client role splits its lookups and
// fetches"; protocol/limits.h kMaxHeaderLen).
//
// The estimate is an upper bound of the JSON encoding: a key is its hex
// digits in quotes plus a comma, a string field may need up to six bytes a
// character (\u00XX escaping), an integer at most 20 digits.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>

#include "protocol/limits.h"
#include "protocol/messages.h"

namespace kvpeer::session::frame_budget {

// Header bytes a frame's keys (and per-key extras) may take. One MiB below
// the limit: room for the other fields, and for the lookup_resp of a lookup
// that used the whole budget (its `hits` add at most 6 bytes a key).
inline constexpr size_t kKeysBudget = protocol::kMaxHeaderLen - 1024 * 1024;

// One key in a `keys` array: "hex", (quotes and comma).
inline size_t KeyBytes(const protocol::Key& key) { return 2 * key.size() + 3; }
// One element of `hits` ("false,") or `block_indexes` ("2147483647,").
inline constexpr size_t kHitBytes = 6;
inline constexpr size_t kBlockIndexBytes = 11;

}  // namespace kvpeer::session::frame_budget
