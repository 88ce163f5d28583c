#include "session/internal/store_ledger.h"

#include <algorithm>

namespace kvpeer::session {

StoreLedger::Job& StoreLedger::Open(JobId id, std::string kv_request_id, TimePoint deadline) {
  deadlines_.emplace(deadline, id);
  Job& job = jobs_[id];
  job.kv_request_id = std::move(kv_request_id);
  job.deadline = deadline;
  return job;
}

StoreLedger::Job* StoreLedger::Find(JobId id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void StoreLedger::StopTimer(JobId id) {
  if (const Job* job = Find(id)) deadlines_.erase({job->deadline, id});
}

void StoreLedger::Succeed(JobId id) { End(id, true, {}, JobFailure::kNone); }

void StoreLedger::Fail(JobId id, JobFailure cause, std::string reason) { End(id, false, std::move(reason), cause); }

void StoreLedger::End(JobId id, bool success, std::string reason, JobFailure cause) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  deadlines_.erase({it->second.deadline, id});
  Record(JobResult{id, std::move(it->second.kv_request_id), success, std::move(reason), cause});
  // Dropping the job drops the pins it still parks.
  jobs_.erase(it);
}

void StoreLedger::Record(JobResult result) { (frame_unwritten_ ? held_ : results_).push_back(std::move(result)); }

std::vector<JobId> StoreLedger::Expired(TimePoint now) const {
  std::vector<JobId> expired;
  for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first <= now; ++it) expired.push_back(it->second);
  return expired;
}

std::optional<TimePoint> StoreLedger::NextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void StoreLedger::OnFrameWritten() {
  frame_unwritten_ = false;
  for (JobResult& result : held_) results_.push_back(std::move(result));
  held_.clear();
}

void StoreLedger::FailHeld(JobId id, JobFailure cause, const std::string& reason) {
  for (JobResult& result : held_) {
    if (result.job_id != id || !result.success) continue;
    result.success = false;
    result.reason = reason;
    result.failure = cause;
  }
}

std::vector<JobResult> StoreLedger::TakeResults() {
  std::vector<JobResult> out = std::move(results_);
  results_.clear();
  return out;
}

std::vector<JobResult> StoreLedger::CloseAll(JobFailure cause, const std::string& reason) {
  std::vector<JobId> open;
  for (const auto& [id, job] : jobs_) open.push_back(id);
  std::sort(open.begin(), open.end());
  for (JobId id : open) Fail(id, cause, reason);
  OnFrameWritten();
  return TakeResults();
}

}  // namespace kvpeer::session
