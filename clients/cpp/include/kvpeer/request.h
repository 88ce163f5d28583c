// Request lines of the control API (control-api.md), built as valid JSON
// whatever the strings hold (escaping included). For pipelining: send
// several with Client::Send, then read their answers in order with
// Client::Receive and decode them with the functions of answer.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvpeer/types.h"

namespace kvpeer {

struct Request {
  std::string line;  // one JSON object, without the newline
  int fd = -1;       // a descriptor sent with the line (SCM_RIGHTS); not owned
  // How long the daemon may hold the answer on purpose (`wait_ms` of poll
  // and lookup): added to the client's request timeout for this answer.
  uint32_t wait_ms = 0;
};

namespace request {

Request Hello(const HelloSettings& settings);
// The region as a descriptor (a memfd or a file under /dev/shm): the daemon
// maps it whatever user it runs as.
Request RegisterRegionFd(int fd, uint64_t num_blocks);
Request RegisterRegionPath(std::string_view path, uint64_t num_blocks, uint64_t offset = 0);
Request Publish(const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids, bool seal = false);
Request Unpublish(const std::vector<std::string>& keys);
Request Lookup(std::string_view peer, std::string_view kv_request_id, const std::vector<std::string>& keys,
               const LookupOptions& options = {});
Request Flush();
Request Load(int64_t job_id, std::string_view peer, std::string_view kv_request_id,
             const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids);
Request Store(int64_t job_id, std::string_view kv_request_id, const std::vector<std::string>& keys,
              const std::vector<BlockId>& block_ids, bool seal = false);
Request Finish(std::string_view kv_request_id);
Request Poll(uint32_t wait_ms = 0);
Request Status();
Request Metrics();
Request Connect(std::string_view peer);
Request Disconnect(std::string_view peer);

}  // namespace request
}  // namespace kvpeer
