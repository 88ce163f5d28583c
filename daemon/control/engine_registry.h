// EngineRegistry: the node-wide half of the engine sessions.
//
// It admits engines (`hello`), allocates node-wide job ids and routes the
// peer side's results back to the engine that submitted the job (engines'
// own job ids may collide across engines), records which engine uses a
// kv_request_id towards which peer (a second engine may not, and failed
// requests are reported to the one that does), and lists engines for
// `status`. It is the daemon's ResultSink.
//
// Results for an engine that has gone are dropped: nobody can poll them.
//
// Thread-safety: none; everything runs on the daemon's one event loop.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <unordered_map>
#include <utility>

#include <boost/asio/any_io_executor.hpp>

#include "base/status_or.h"
#include "daemon/api/api_error.h"
#include "daemon/api/control_requests.h"
#include "daemon/node/published_blocks.h"
#include "daemon/metrics/counters.h"
#include "daemon/metrics/limit_reporter.h"
#include "daemon/node/node_model.h"
#include "daemon/node/peer_service.h"
#include "daemon/node/seal_hasher.h"

namespace kvpeer::daemon {

class EngineSession;

// Bounds of what one engine's requests may cost (docs/security.md, "Engine
// state is bounded in bytes"); 0 = unbounded.
struct EngineLimits {
  uint64_t max_seal_bytes = 0;          // --max-seal-bytes: hashed by one sealed publish or store
  uint64_t max_open_request_bytes = 0;  // --max-open-request-bytes: an engine's unfinished requests
};

// The peer credentials of a control connection (SO_PEERCRED), and the
// supplementary groups it had when it connected (SO_PEERGROUPS; empty when
// the kernel cannot tell).
struct PeerCredentials {
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
};

class EngineRegistry : public ResultSink {
 public:
  // `node_id` is answered to `hello`. The model and the index must outlive
  // the registry.
  EngineRegistry(boost::asio::any_io_executor executor, NodeModel& model, NodePublishedBlocks& index,
                 std::string node_id);
  ~EngineRegistry() override;
  EngineRegistry(const EngineRegistry&) = delete;
  EngineRegistry& operator=(const EngineRegistry&) = delete;

  // The peer side and the registry refer to each other, so the peer side is
  // attached after both exist. REQUIRES: before the first engine request;
  // `peers` outlives every engine session.
  void set_peer_service(PeerService* peers) { peers_ = peers; }
  // Null until attached.
  PeerService* peer_service() const { return peers_; }
  // The node id answered to `hello`, when known only once the peer
  // listener is bound (a port 0 listen).
  void set_node_id(std::string node_id) { node_id_ = std::move(node_id); }
  // --max-engines: a hello beyond this many engine sessions answers
  // conflict (counted as limit_max_engines). 0 = no limit.
  void set_max_engines(size_t max_engines) { max_engines_ = max_engines; }
  // --max-region-bytes: bytes of engine regions mapped at once, node-wide;
  // a register_region beyond it answers conflict (counted as
  // limit_max_region_bytes). 0 = no limit.
  void set_max_region_bytes(uint64_t max_region_bytes) { max_region_bytes_ = max_region_bytes; }
  void set_engine_limits(EngineLimits limits) { engine_limits_ = limits; }
  const EngineLimits& engine_limits() const { return engine_limits_; }

  // The `hello` op: checks the engine's settings against the node's and
  // opens its session. `may_fix_model` not ok: this caller may not fix
  // model settings the node's config left unset (NodeModel::CheckOrAdopt).
  StatusOr<std::shared_ptr<EngineSession>> Hello(const HelloRequest& request, const PeerCredentials& credentials,
                                                 const Status& may_fix_model = Status::Ok());
  // This node's name on the wire (hello's `node_id`).
  const std::string& node_id() const { return node_id_; }

  // ResultSink.
  void OnLoadResult(const session::JobResult& result) override;
  void OnStoreResult(const session::JobResult& result) override;
  void OnRequestFailed(const std::string& peer, const std::string& kv_request_id) override;
  void OnProbesChanged(const std::string& peer, bool ended) override;

  // status.engines: one row per engine session, oldest first.
  struct EngineStatus {
    std::string client;
    int32_t pid = 0;
    uint32_t num_blocks = 0;
    size_t published = 0;
    size_t loads_in_flight = 0;
  };
  std::vector<EngineStatus> EnginesStatus() const;
  size_t engine_count() const { return engines_.size(); }
  // Sums over the engine sessions, for the metrics.
  struct Totals {
    size_t loads_in_flight = 0;
    size_t jobs_pending = 0;
  };
  Totals EngineTotals() const;
  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }

  // --- Used by EngineSession. ---
  const boost::asio::any_io_executor& executor() const { return executor_; }
  NodePublishedBlocks& index() { return index_; }
  // A fresh node-wide job id whose result goes to (engine, engine_job).
  session::JobId AddRoute(EngineId engine, int64_t engine_job);
  void DropRoute(session::JobId job);
  // The engine using `kv_request_id` towards `peer`, if any.
  std::optional<EngineId> KvUser(const std::string& peer, const std::string& kv_request_id) const;
  // REQUIRES: no other engine uses it. Returns true when newly claimed.
  bool ClaimKv(const std::string& peer, const std::string& kv_request_id, EngineId engine);
  void ReleaseKv(const std::string& peer, const std::string& kv_request_id);
  // Store supply is its engine's (docs/control-api.md, "`store`"):
  // the engine that supplies `kv_request_id`, if any.
  std::optional<EngineId> SupplyOwner(const std::string& kv_request_id) const;
  // REQUIRES: no other engine supplies it.
  void ClaimSupply(const std::string& kv_request_id, EngineId engine);
  // Only `engine`'s claim is released.
  void ReleaseSupply(const std::string& kv_request_id, EngineId engine);
  // Reserves `bytes` of --max-region-bytes for one region: conflict naming
  // the limit when it does not fit. The charge holds the bytes until it is
  // destroyed (the region holds it, so a region still mapped for a transfer
  // after its engine left still counts).
  StatusOr<std::shared_ptr<const void>> ChargeRegion(uint64_t bytes);
  // Bytes of engine regions mapped now.
  uint64_t region_bytes() const { return *region_bytes_; }
  // Counts and logs a hit of a limit counter; conflict with `why`.
  Status RefuseLimit(Counter counter, const std::string& op, std::string why);
  // Hashes slots for sealed publishes and stores, off the event loop.
  SealHasher& seal_hasher() { return seal_hasher_; }
  // The session is closing; it gets nothing more.
  void Unregister(EngineId engine);

 private:
  struct Route {
    EngineId engine;
    int64_t engine_job;
  };
  // The session owed `job`'s result (nullptr if none) and its job id there;
  // the route is consumed either way.
  struct RouteEnd {
    EngineSession* session = nullptr;
    int64_t engine_job = 0;
  };
  RouteEnd TakeRoute(session::JobId job);

  boost::asio::any_io_executor executor_;
  NodeModel& model_;
  NodePublishedBlocks& index_;
  std::string node_id_;
  PeerService* peers_ = nullptr;
  Counters counters_;
  size_t max_engines_ = 0;
  uint64_t max_region_bytes_ = 0;
  // Shared with every charge, so a region outliving the registry counts down safely.
  std::shared_ptr<uint64_t> region_bytes_ = std::make_shared<uint64_t>(0);
  std::map<std::string, EngineId> supply_owners_;  // kv_request_id -> the engine storing for it
  LimitReporter limits_;
  EngineLimits engine_limits_;
  SealHasher seal_hasher_;

  EngineId next_engine_ = 1;
  session::JobId next_job_ = 1;
  std::map<EngineId, EngineSession*> engines_;  // ordered: status lists engines by age
  std::unordered_map<session::JobId, Route> routes_;
  std::map<std::pair<std::string, std::string>, EngineId> kv_users_;  // (peer, kv_request_id)
};

}  // namespace kvpeer::daemon
