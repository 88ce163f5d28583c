#include "daemon/control/engine_registry.h"

#include <spdlog/spdlog.h>

#include "daemon/control/engine_session.h"
#include "daemon/metrics/reason_labels.h"
#include "protocol/limits.h"

namespace kvpeer::daemon {

EngineRegistry::EngineRegistry(boost::asio::any_io_executor executor, NodeModel& model, NodePublishedBlocks& index,
                               std::string node_id)
    : executor_(std::move(executor)), model_(model), index_(index), node_id_(std::move(node_id)) {}

EngineRegistry::~EngineRegistry() = default;

StatusOr<std::shared_ptr<EngineSession>> EngineRegistry::Hello(const HelloRequest& request,
                                                               const PeerCredentials& credentials,
                                                               const Status& may_fix_model) {
  const std::string& client = request.client;
  const ModelSettings settings{request.block_len, request.config_fingerprint, request.hash_seed};
  if (Status incompatible = model_.CheckOrAdopt(settings, may_fix_model); !incompatible.ok()) return incompatible;
  if (max_engines_ != 0 && engines_.size() >= max_engines_) {
    // conflict: the request is valid but the node's state refuses it; it
    // succeeds once another engine session has ended.
    const std::string why = "max-engines (" + std::to_string(max_engines_) + ") reached: this node already has " +
                            std::to_string(engines_.size()) +
                            " engine sessions; one must end first, or raise --max-engines";
    limits_.Hit(&counters_, Counter::kLimitMaxEngines,
                "engine '" + client + "' (pid " + std::to_string(credentials.pid) + ") refused: " + why);
    return Status::Conflict(why);
  }

  const EngineId id = next_engine_++;
  auto session = std::make_shared<EngineSession>(*this, id, client, settings.block_len, credentials);
  engines_[id] = session.get();
  counters_.Add(Counter::kEnginesAdmitted);
  spdlog::info("engine '{}' (pid {}) said hello as engine {}", client, credentials.pid, id);
  return session;
}

session::JobId EngineRegistry::AddRoute(EngineId engine, int64_t engine_job) {
  const session::JobId job = next_job_++;
  routes_[job] = Route{engine, engine_job};
  return job;
}

void EngineRegistry::DropRoute(session::JobId job) { routes_.erase(job); }

EngineRegistry::RouteEnd EngineRegistry::TakeRoute(session::JobId job) {
  auto route = routes_.find(job);
  if (route == routes_.end()) return {};
  const Route taken = route->second;
  routes_.erase(route);
  auto session = engines_.find(taken.engine);
  return {session == engines_.end() ? nullptr : session->second, taken.engine_job};
}

void EngineRegistry::OnLoadResult(const session::JobResult& result) {
  counters_.Add(result.success ? Counter::kLoadResultsSucceeded : Counter::kLoadResultsFailed);
  if (const RouteEnd end = TakeRoute(result.job_id); end.session != nullptr) {
    end.session->OnLoadResult(end.engine_job, result);
  } else {
    counters_.Add(Counter::kResultsDropped);
  }
}

void EngineRegistry::OnStoreResult(const session::JobResult& result) {
  counters_.Add(result.success ? Counter::kStoreResultsSucceeded : Counter::kStoreResultsFailed);
  if (!result.success) {
    counters_.Add(CounterFamily::kStoreFailures, StoreFailureLabel(result.failure));
    spdlog::info("store (node job {}) of kv_request_id {} failed: {}", result.job_id, result.kv_request_id,
                 result.reason);
  }
  if (const RouteEnd end = TakeRoute(result.job_id); end.session != nullptr) {
    end.session->OnStoreResult(end.engine_job, result);
  } else {
    counters_.Add(Counter::kResultsDropped);
  }
}

void EngineRegistry::OnRequestFailed(const std::string& peer, const std::string& kv_request_id) {
  counters_.Add(Counter::kRequestsFailed);
  auto user = kv_users_.find({peer, kv_request_id});
  if (user == kv_users_.end()) return;
  auto session = engines_.find(user->second);
  if (session != engines_.end()) session->second->OnRequestFailed(kv_request_id);
}

// Each session waits for at most one lookup (LookupWait), so this visits
// at most --max-engines waits.
void EngineRegistry::OnProbesChanged(const std::string& peer, bool ended) {
  for (const auto& [id, session] : engines_) session->OnProbesChanged(peer, ended);
}

std::optional<EngineId> EngineRegistry::KvUser(const std::string& peer, const std::string& kv_request_id) const {
  auto user = kv_users_.find({peer, kv_request_id});
  if (user == kv_users_.end()) return std::nullopt;
  return user->second;
}

bool EngineRegistry::ClaimKv(const std::string& peer, const std::string& kv_request_id, EngineId engine) {
  return kv_users_.try_emplace({peer, kv_request_id}, engine).second;
}

void EngineRegistry::ReleaseKv(const std::string& peer, const std::string& kv_request_id) {
  kv_users_.erase({peer, kv_request_id});
}

std::optional<EngineId> EngineRegistry::SupplyOwner(const std::string& kv_request_id) const {
  auto owner = supply_owners_.find(kv_request_id);
  if (owner == supply_owners_.end()) return std::nullopt;
  return owner->second;
}

void EngineRegistry::ClaimSupply(const std::string& kv_request_id, EngineId engine) {
  supply_owners_.try_emplace(kv_request_id, engine);
}

void EngineRegistry::ReleaseSupply(const std::string& kv_request_id, EngineId engine) {
  auto owner = supply_owners_.find(kv_request_id);
  if (owner != supply_owners_.end() && owner->second == engine) supply_owners_.erase(owner);
}

StatusOr<std::shared_ptr<const void>> EngineRegistry::ChargeRegion(uint64_t bytes) {
  const uint64_t mapped = *region_bytes_;
  if (max_region_bytes_ != 0 && (bytes > max_region_bytes_ || mapped > max_region_bytes_ - bytes)) {
    const std::string why = "max-region-bytes (" + std::to_string(max_region_bytes_) +
                            ") reached: " + std::to_string(mapped) +
                            " bytes of engine regions are mapped and this region needs " + std::to_string(bytes) +
                            "; a smaller region, or raise --max-region-bytes";
    limits_.Hit(&counters_, Counter::kLimitMaxRegionBytes, "register_region refused: " + why);
    return Status::Conflict(why);
  }
  *region_bytes_ += bytes;
  std::shared_ptr<uint64_t> total = region_bytes_;
  return std::shared_ptr<const void>(nullptr, [total, bytes](const void*) { *total -= bytes; });
}

Status EngineRegistry::RefuseLimit(Counter counter, const std::string& op, std::string why) {
  limits_.Hit(&counters_, counter, op + " refused: " + why);
  return Status::Conflict(std::move(why));
}

void EngineRegistry::Unregister(EngineId engine) { engines_.erase(engine); }

EngineRegistry::Totals EngineRegistry::EngineTotals() const {
  Totals totals;
  for (const auto& [id, session] : engines_) {
    totals.loads_in_flight += session->loads_in_flight();
    totals.jobs_pending += session->jobs_pending();
  }
  return totals;
}

std::vector<EngineRegistry::EngineStatus> EngineRegistry::EnginesStatus() const {
  std::vector<EngineStatus> engines;
  engines.reserve(engines_.size());
  for (const auto& [id, session] : engines_) {
    engines.push_back({session->client(), session->credentials().pid, session->num_blocks(), index_.published(id),
                       session->loads_in_flight()});
  }
  return engines;
}

}  // namespace kvpeer::daemon
