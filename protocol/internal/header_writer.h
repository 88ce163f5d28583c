// HeaderWriter: the JSON header of the messages whose size grows with their
// lists (lookup, lookup_resp, fetch, block_data), written straight into a
// string.
//
// Building a boost::json::object first cost an allocation per key and per
// checksum and a second pass to serialize it: for a lookup of 8192 keys,
// about as much as the rest of the producer's work on it. The text is
// exactly what boost::json::serialize made of that object (same field order,
// same escaping, no spaces), so nothing changes on the wire; the codec tests
// compare the two.
//
// Thread-safety: plain functions.
#pragma once

#include <string>

#include "protocol/messages.h"

namespace kvpeer::protocol::internal {

// Appends the whole header, from '{' to '}', to `out`.
void WriteHeader(const Lookup& m, std::string* out);
void WriteHeader(const LookupResp& m, std::string* out);
void WriteHeader(const Fetch& m, std::string* out);
void WriteHeader(const BlockData& m, std::string* out);

}  // namespace kvpeer::protocol::internal
