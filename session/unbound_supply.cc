#include "session/unbound_supply.h"

#include <algorithm>

namespace kvpeer::session {
namespace {

JobResult Failure(const ParkedStore& store, JobFailure cause, std::string reason) {
  return JobResult{store.job_id, store.kv_request_id, false, std::move(reason), cause};
}

}  // namespace

void UnboundSupply::Add(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                        std::vector<PinRef> blocks, TimePoint now) {
  kv_of_[job_id] = kv_request_id;
  deadlines_.emplace(now + timeout_, job_id);
  by_kv_[kv_request_id].push_back(ParkedStore{job_id, kv_request_id, std::move(keys), std::move(blocks), now});
}

ParkedStore UnboundSupply::Remove(JobId job_id) {
  auto kv_it = kv_of_.find(job_id);
  auto list_it = by_kv_.find(kv_it->second);
  std::vector<ParkedStore>& list = list_it->second;
  auto it = std::find_if(list.begin(), list.end(), [&](const ParkedStore& s) { return s.job_id == job_id; });
  ParkedStore store = std::move(*it);
  list.erase(it);
  if (list.empty()) by_kv_.erase(list_it);
  kv_of_.erase(kv_it);
  deadlines_.erase({store.added_at + timeout_, job_id});
  return store;
}

std::vector<ParkedStore> UnboundSupply::Take(const std::string& kv_request_id) {
  auto it = by_kv_.find(kv_request_id);
  if (it == by_kv_.end()) return {};
  std::vector<ParkedStore> taken = std::move(it->second);
  by_kv_.erase(it);
  for (const ParkedStore& store : taken) {
    kv_of_.erase(store.job_id);
    deadlines_.erase({store.added_at + timeout_, store.job_id});
  }
  return taken;
}

std::vector<JobResult> UnboundSupply::OnTick(TimePoint now) {
  std::vector<JobResult> failed;
  const std::string limit = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count());
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    ParkedStore store = Remove(deadlines_.begin()->second);
    failed.push_back(Failure(store, JobFailure::kTimeout,
                             "no peer fetched kv_request_id " + store.kv_request_id + " within " + limit + " s"));
  }
  return failed;
}

std::vector<JobResult> UnboundSupply::Cancel(const std::string& kv_request_id, JobFailure cause,
                                             const std::string& reason) {
  std::vector<JobResult> failed;
  for (const ParkedStore& store : Take(kv_request_id)) failed.push_back(Failure(store, cause, reason));
  return failed;
}

std::vector<JobResult> UnboundSupply::CancelAll(JobFailure cause, const std::string& reason) {
  std::vector<JobResult> failed;
  while (!by_kv_.empty()) {
    std::vector<JobResult> some = Cancel(by_kv_.begin()->first, cause, reason);
    failed.insert(failed.end(), some.begin(), some.end());
  }
  return failed;
}

std::optional<TimePoint> UnboundSupply::NextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

}  // namespace kvpeer::session
