// Typed control requests: one struct per op, holding the op's fields once
// they are validated (docs/control-api.md, "3. Engine session" and
// "4. Operator operations"; field rules in "1. Framing"). Built only by
// the parsers of request_parsers.h; the engine session and the control
// server act on these and never read the request's JSON themselves.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace kvpeer::daemon {

struct HelloRequest {
  std::string client;
  uint64_t block_len = 0;  // >= 1
  std::string config_fingerprint;
  std::string hash_seed;
};

struct RegisterRegionRequest {
  // Exactly one of: a path, or `fd: true` (the descriptor came with the line).
  std::optional<std::string> path;
  bool by_fd() const { return !path.has_value(); }
  uint64_t num_blocks = 0;  // >= 1
  uint64_t offset = 0;
};

struct PublishRequest {
  std::vector<protocol::Key> keys;
  std::vector<uint64_t> block_ids;  // as many as keys; not checked against the region
  bool seal = false;
};

struct UnpublishRequest {
  std::vector<protocol::Key> keys;
};

struct LookupRequest {
  std::string peer;
  std::string kv_request_id;
  std::vector<protocol::Key> keys;
  bool flush = false;
  uint64_t wait_ms = 0;  // 0: answer at once
};

struct LoadRequest {
  int64_t job_id = 0;
  std::string peer;
  std::string kv_request_id;
  std::vector<protocol::Key> keys;  // at least one
  std::vector<uint64_t> block_ids;  // as many as keys
};

struct StoreRequest {
  int64_t job_id = 0;
  std::string kv_request_id;
  std::vector<protocol::Key> keys;  // at least one
  std::vector<uint64_t> block_ids;  // as many as keys
  bool seal = false;                // the slots' checksums are kept from now
};

struct FinishRequest {
  std::string kv_request_id;
};

struct PollRequest {
  uint64_t wait_ms = 0;  // 0: answer at once
};

// `connect` and `disconnect`.
struct PeerRequest {
  std::string peer;
};

}  // namespace kvpeer::daemon
