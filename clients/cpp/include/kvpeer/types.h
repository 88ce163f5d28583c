// The values of the control API (control-api.md section 2) as C++ types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvpeer {

// Block ids are indexes into the engine's registered region.
using BlockId = uint32_t;

// `hello`: the engine's settings; they must equal the node's.
struct HelloSettings {
  std::string client;              // a name for logs and `kvpeerctl status`
  uint64_t block_len = 0;          // bytes per block
  std::string config_fingerprint;  // engines that must not share blocks differ here
  std::string hash_seed;
};

struct HelloInfo {
  std::string node_id;
  std::string version;
  std::string wire_version;
};

struct RegionInfo {
  int64_t region_id = 0;
  uint64_t bytes = 0;
};

struct UnpublishResult {
  std::vector<BlockId> released;  // free now
  std::vector<BlockId> pinned;    // in use by a transfer: reuse after `released` names them
};

// One key's answer to a `lookup`.
enum class Probe { kHit, kMiss, kRetry };

struct LookupOptions {
  bool flush = false;               // send the probe at once
  std::optional<uint32_t> wait_ms;  // answer once no key is `retry`, or after this long (<= 60000)
};

struct JobResult {
  int64_t job_id = 0;
  std::string kv_request_id;
  bool success = false;
  std::string reason;  // empty on success
};

struct PollReport {
  std::vector<JobResult> results;
  std::vector<std::string> failed_requests;
  std::vector<BlockId> released;
};

}  // namespace kvpeer
