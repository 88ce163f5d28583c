// StoreLedger: the server role's open store jobs and the results they end
// with.
//
// A store job's result is what tells the engine that its source slots are
// free again. So a result must not reach the engine while a frame that reads
// one of those slots may still be unwritten. The ledger enforces that with
// the writer's pull contract (ServerRole::ProduceDataFrame is only called
// once the previous data frame has been written): results decided while a
// data frame is unwritten are held, and released by the next pull.
//
// Every job ends exactly once: Succeed/Fail of a job that already ended is a
// no-op, which is how a late event after a timeout gives no second result
// (E43).
//
// Thread-safety: none; owned by one ServerRole.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::session {

class StoreLedger {
 public:
  struct Job {
    std::string kv_request_id;
    TimePoint deadline;
    // Some fetch took its blocks. A bound job holds no parked blocks and no
    // deadline: its blocks sit in rounds, which end by their own terminals.
    bool bound = false;
    // The job's blocks while unbound. Binding moves the demanded ones into
    // rounds' queues and drops the rest.
    std::vector<std::pair<protocol::Key, PinRef>> parked;
    size_t queued = 0;  // blocks waiting in rounds' queues
    size_t sent = 0;    // blocks handed to a frame
    // Why some of its queued blocks were never sent; nullopt while none was
    // lost. Decides the result once nothing of the job is queued any more.
    std::optional<FailureReport> lost;
  };

  // REQUIRES: !IsOpen(id).
  Job& Open(JobId id, std::string kv_request_id, TimePoint deadline);
  bool IsOpen(JobId id) const { return jobs_.contains(id); }
  Job* Find(JobId id);
  // The job no longer times out (it was bound).
  void StopTimer(JobId id);

  // End an open job with its one result; no-op when the job is not open.
  void Succeed(JobId id);
  void Fail(JobId id, JobFailure cause, std::string reason);
  // The result of a job that was never opened (rejected at AddSupply).
  void Record(JobResult result);

  // Open jobs whose deadline is at or before `now`, earliest first.
  std::vector<JobId> Expired(TimePoint now) const;
  std::optional<TimePoint> NextDeadline() const;

  // The writer's pull contract (see the file comment).
  void OnFrameProduced() { frame_unwritten_ = true; }
  void OnFrameWritten();
  bool HasHeldResults() const { return !held_.empty(); }
  // A held success of `id` becomes a failure (its last frame was torn).
  void FailHeld(JobId id, JobFailure cause, const std::string& reason);

  std::vector<JobResult> TakeResults();
  // Fails every open job with `reason` and returns every result not taken
  // yet, held ones included (E58). The caller makes sure no frame is still
  // being written when it hands them on.
  std::vector<JobResult> CloseAll(JobFailure cause, const std::string& reason);

  size_t open_jobs() const { return jobs_.size(); }

 private:
  void End(JobId id, bool success, std::string reason, JobFailure cause);

  std::unordered_map<JobId, Job> jobs_;
  std::set<std::pair<TimePoint, JobId>> deadlines_;  // the open jobs that still time out
  std::vector<JobResult> results_;                   // safe to hand to the engine
  std::vector<JobResult> held_;                      // decided while a frame was unwritten
  bool frame_unwritten_ = false;
};

}  // namespace kvpeer::session
