#include "daemon/control/engine_jobs.h"

#include <utility>

namespace kvpeer::daemon {

using protocol::SlotIndex;

Status EngineJobs::CheckJobIdFree(int64_t job_id) const {
  if (!jobs_.contains(job_id)) return Status::Ok();
  return Status::Conflict("job_id " + std::to_string(job_id) +
                          " is still in use: its result has not been delivered by poll yet");
}

Status EngineJobs::CheckLoadSlots(const std::vector<SlotIndex>& slots) const {
  std::unordered_map<SlotIndex, size_t> seen;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (auto [it, fresh] = seen.emplace(slots[i], i); !fresh) {
      return Status::Invalid("field 'block_ids' names slot " + std::to_string(slots[i]) + " twice (items " +
                             std::to_string(it->second) + " and " + std::to_string(i) +
                             "); each destination slot takes one block");
    }
    if (auto busy = load_slots_.find(slots[i]); busy != load_slots_.end()) {
      return Status::Conflict("block id " + std::to_string(slots[i]) + " is a destination of load job_id " +
                              std::to_string(busy->second) + ", still in flight");
    }
  }
  return Status::Ok();
}

void EngineJobs::AddLoad(int64_t job_id, session::JobId node_job, const std::string& kv_request_id,
                         std::vector<SlotIndex> slots) {
  Job& job = jobs_[job_id];
  job.node_job = node_job;
  job.is_load = true;
  job.result.kv_request_id = kv_request_id;
  for (SlotIndex slot : slots) load_slots_[slot] = job_id;
  job.dest_slots = std::move(slots);
  ++loads_in_flight_;
}

void EngineJobs::AddStore(int64_t job_id, session::JobId node_job, const std::string& kv_request_id) {
  Job& job = jobs_[job_id];
  job.node_job = node_job;
  job.pinned = true;
  job.result.kv_request_id = kv_request_id;
}

void EngineJobs::Remove(int64_t job_id, session::JobId node_job) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.node_job != node_job || it->second.reported) return;
  if (it->second.is_load) EndLoadSlots(job_id, it->second);
  jobs_.erase(it);
}

void EngineJobs::EndLoadSlots(int64_t job_id, Job& job) {
  for (SlotIndex slot : job.dest_slots) {
    auto it = load_slots_.find(slot);
    if (it != load_slots_.end() && it->second == job_id) load_slots_.erase(it);
  }
  job.dest_slots.clear();
  --loads_in_flight_;
}

void EngineJobs::MaybeReady(int64_t job_id, const Job& job) {
  if (!job.reported || job.pinned) return;
  ready_.push_back(job_id);
  on_ready_();
}

void EngineJobs::OnResult(int64_t job_id, const session::JobResult& result) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.node_job != result.job_id || it->second.reported) return;
  Job& job = it->second;
  // The peer side writes no slot after reporting a load: its slots are free.
  if (job.is_load) EndLoadSlots(job_id, job);
  job.reported = true;
  job.result = result;
  MaybeReady(job_id, job);
}

void EngineJobs::OnStorePinsDropped(int64_t job_id, session::JobId node_job) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.node_job != node_job || !it->second.pinned) return;
  it->second.pinned = false;
  MaybeReady(job_id, it->second);
}

void EngineJobs::OnRequestFailed(const std::string& kv_request_id) {
  if (!failed_set_.insert(kv_request_id).second) return;
  failed_requests_.push_back(kv_request_id);
  on_ready_();
}

void EngineJobs::OnReleased(SlotIndex slot) {
  released_.push_back(slot);
  on_ready_();
}

PollReport EngineJobs::TakeReport() {
  PollReport report;
  report.results.reserve(ready_.size());
  for (int64_t job_id : ready_) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) continue;
    report.results.push_back({job_id, std::move(it->second.result)});
    jobs_.erase(it);  // delivered: the job id is free again
  }
  ready_.clear();
  report.failed_requests = std::move(failed_requests_);
  report.released = std::move(released_);
  failed_requests_.clear();
  failed_set_.clear();
  released_.clear();
  return report;
}

std::vector<session::JobId> EngineJobs::NodeJobs() const {
  std::vector<session::JobId> node_jobs;
  for (const auto& [job_id, job] : jobs_) node_jobs.push_back(job.node_job);
  return node_jobs;
}

void EngineJobs::Clear() {
  jobs_.clear();
  load_slots_.clear();
  loads_in_flight_ = 0;
  ready_.clear();
  failed_requests_.clear();
  failed_set_.clear();
  released_.clear();
}

}  // namespace kvpeer::daemon
