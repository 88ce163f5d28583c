#include "daemon/api/request_parsers.h"

#include <limits>
#include <utility>

#include "daemon/api/json_request.h"
#include "daemon/api/request_limits.h"

namespace kvpeer::daemon {

// Each function reads its fields in the order the op's row of
// docs/control-api.md lists them: the first failure is the one answered.

StatusOr<HelloRequest> ParseHello(const boost::json::object& request) {
  RequestReader reader(request);
  HelloRequest hello;
  hello.client = reader.String("client", 1, kMaxRequestStringChars);
  hello.block_len = reader.Uint("block_len", kMaxRequestBlockLen);
  hello.config_fingerprint = reader.String("config_fingerprint", 0, kMaxRequestStringChars);
  hello.hash_seed = reader.IdString("hash_seed");
  if (!reader.ok()) return reader.status();
  if (hello.block_len == 0) {
    return Status::Invalid("field 'block_len' must be an integer in 1 ..= " + std::to_string(kMaxRequestBlockLen) +
                           ", is 0");
  }
  return hello;
}

StatusOr<RegisterRegionRequest> ParseRegisterRegion(const boost::json::object& request) {
  RequestReader reader(request);
  RegisterRegionRequest region;
  const bool by_fd = reader.OptionalBool("fd").value_or(false);
  region.path = reader.OptionalString("path", 1, kMaxPathChars);
  region.num_blocks = reader.Uint("num_blocks", kMaxNumBlocks);
  region.offset = reader.OptionalUint("offset", std::numeric_limits<uint64_t>::max()).value_or(0);
  if (!reader.ok()) return reader.status();
  if (by_fd == region.path.has_value()) {
    return Status::Invalid(by_fd ? "give either 'path' or 'fd': true, not both"
                                 : "field 'path' is required (or 'fd': true with the descriptor "
                                   "passed with this line via SCM_RIGHTS)");
  }
  if (region.num_blocks == 0) return Status::Invalid("field 'num_blocks' must be at least 1, is 0");
  return region;
}

StatusOr<PublishRequest> ParsePublish(const boost::json::object& request) {
  RequestReader reader(request);
  PublishRequest publish;
  publish.keys = reader.Keys("keys", 0);
  publish.block_ids = reader.BlockIds("block_ids", 0);
  publish.seal = reader.OptionalBool("seal").value_or(false);
  reader.SameLength("block_ids", publish.block_ids.size(), "keys", publish.keys.size());
  if (!reader.ok()) return reader.status();
  return publish;
}

StatusOr<UnpublishRequest> ParseUnpublish(const boost::json::object& request) {
  RequestReader reader(request);
  UnpublishRequest unpublish;
  unpublish.keys = reader.Keys("keys", 0);
  if (!reader.ok()) return reader.status();
  return unpublish;
}

StatusOr<LookupRequest> ParseLookup(const boost::json::object& request) {
  RequestReader reader(request);
  LookupRequest lookup;
  lookup.peer = reader.Peer("peer");
  lookup.kv_request_id = reader.IdString("kv_request_id");
  lookup.keys = reader.Keys("keys", 0);
  lookup.flush = reader.OptionalBool("flush").value_or(false);
  lookup.wait_ms = reader.OptionalUint("wait_ms", kMaxWaitMs).value_or(0);
  if (!reader.ok()) return reader.status();
  return lookup;
}

StatusOr<LoadRequest> ParseLoad(const boost::json::object& request) {
  RequestReader reader(request);
  LoadRequest load;
  load.job_id = reader.Int("job_id");
  load.peer = reader.Peer("peer");
  load.kv_request_id = reader.IdString("kv_request_id");
  load.keys = reader.Keys("keys", 1);
  load.block_ids = reader.BlockIds("block_ids", 1);
  reader.SameLength("block_ids", load.block_ids.size(), "keys", load.keys.size());
  if (!reader.ok()) return reader.status();
  return load;
}

StatusOr<StoreRequest> ParseStore(const boost::json::object& request) {
  RequestReader reader(request);
  StoreRequest store;
  store.job_id = reader.Int("job_id");
  store.kv_request_id = reader.IdString("kv_request_id");
  store.keys = reader.Keys("keys", 1);
  store.block_ids = reader.BlockIds("block_ids", 1);
  store.seal = reader.OptionalBool("seal").value_or(false);  // store only (control-api.md section 2)
  reader.SameLength("block_ids", store.block_ids.size(), "keys", store.keys.size());
  if (!reader.ok()) return reader.status();
  return store;
}

StatusOr<FinishRequest> ParseFinish(const boost::json::object& request) {
  RequestReader reader(request);
  FinishRequest finish;
  finish.kv_request_id = reader.IdString("kv_request_id");
  if (!reader.ok()) return reader.status();
  return finish;
}

StatusOr<PollRequest> ParsePoll(const boost::json::object& request) {
  RequestReader reader(request);
  PollRequest poll;
  poll.wait_ms = reader.OptionalUint("wait_ms", kMaxWaitMs).value_or(0);
  if (!reader.ok()) return reader.status();
  return poll;
}

StatusOr<PeerRequest> ParsePeerRequest(const boost::json::object& request) {
  RequestReader reader(request);
  PeerRequest peer;
  peer.peer = reader.Peer("peer");
  if (!reader.ok()) return reader.status();
  return peer;
}

}  // namespace kvpeer::daemon
