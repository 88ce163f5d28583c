#include "kvpeer/request.h"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace kvpeer::request {
namespace {

namespace json = boost::json;

json::object Op(std::string_view op) {
  json::object request;
  request["op"] = op;
  return request;
}

json::array Strings(const std::vector<std::string>& items) {
  json::array out;
  out.reserve(items.size());
  for (const std::string& item : items) out.emplace_back(item);
  return out;
}

json::array Ids(const std::vector<BlockId>& ids) { return json::array(ids.begin(), ids.end()); }

Request Line(const json::object& request, int fd = -1) { return Request{json::serialize(request), fd}; }

}  // namespace

Request Hello(const HelloSettings& settings) {
  json::object r = Op("hello");
  r["client"] = settings.client;
  r["block_len"] = settings.block_len;
  r["config_fingerprint"] = settings.config_fingerprint;
  r["hash_seed"] = settings.hash_seed;
  return Line(r);
}

Request RegisterRegionFd(int fd, uint64_t num_blocks) {
  json::object r = Op("register_region");
  r["fd"] = true;
  r["num_blocks"] = num_blocks;
  return Line(r, fd);
}

Request RegisterRegionPath(std::string_view path, uint64_t num_blocks, uint64_t offset) {
  json::object r = Op("register_region");
  r["path"] = path;
  r["num_blocks"] = num_blocks;
  if (offset != 0) r["offset"] = offset;
  return Line(r);
}

Request Publish(const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids, bool seal) {
  json::object r = Op("publish");
  r["keys"] = Strings(keys);
  r["block_ids"] = Ids(block_ids);
  if (seal) r["seal"] = true;
  return Line(r);
}

Request Unpublish(const std::vector<std::string>& keys) {
  json::object r = Op("unpublish");
  r["keys"] = Strings(keys);
  return Line(r);
}

Request Lookup(std::string_view peer, std::string_view kv_request_id, const std::vector<std::string>& keys,
               const LookupOptions& options) {
  json::object r = Op("lookup");
  r["peer"] = peer;
  r["kv_request_id"] = kv_request_id;
  r["keys"] = Strings(keys);
  if (options.flush) r["flush"] = true;
  if (options.wait_ms) r["wait_ms"] = *options.wait_ms;
  Request request = Line(r);
  request.wait_ms = options.wait_ms.value_or(0);
  return request;
}

Request Flush() { return Line(Op("flush")); }

Request Load(int64_t job_id, std::string_view peer, std::string_view kv_request_id,
             const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids) {
  json::object r = Op("load");
  r["job_id"] = job_id;
  r["peer"] = peer;
  r["kv_request_id"] = kv_request_id;
  r["keys"] = Strings(keys);
  r["block_ids"] = Ids(block_ids);
  return Line(r);
}

Request Store(int64_t job_id, std::string_view kv_request_id, const std::vector<std::string>& keys,
              const std::vector<BlockId>& block_ids, bool seal) {
  json::object r = Op("store");
  r["job_id"] = job_id;
  r["kv_request_id"] = kv_request_id;
  r["keys"] = Strings(keys);
  r["block_ids"] = Ids(block_ids);
  if (seal) r["seal"] = true;
  return Line(r);
}

Request Finish(std::string_view kv_request_id) {
  json::object r = Op("finish");
  r["kv_request_id"] = kv_request_id;
  return Line(r);
}

Request Poll(uint32_t wait_ms) {
  json::object r = Op("poll");
  if (wait_ms != 0) r["wait_ms"] = wait_ms;
  Request request = Line(r);
  request.wait_ms = wait_ms;
  return request;
}

Request Status() { return Line(Op("status")); }

Request Metrics() { return Line(Op("metrics")); }

Request Connect(std::string_view peer) {
  json::object r = Op("connect");
  r["peer"] = peer;
  return Line(r);
}

Request Disconnect(std::string_view peer) {
  json::object r = Op("disconnect");
  r["peer"] = peer;
  return Line(r);
}

}  // namespace kvpeer::request
