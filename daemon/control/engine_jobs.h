// EngineJobs: one engine's job table and its poll outbox.
//
// Jobs are keyed by the engine's own job ids and stay until `poll` has
// delivered their result, which is what makes a job id reusable. A load's
// destination slots are "in flight" until the peer side reports the load
// (it writes no slot after that), so overlap is checked against those only.
// A store becomes ready only once reported AND unpinned. The outbox also
// collects failed request ids (deduplicated between polls) and released
// slots. Whenever something becomes ready `on_ready` is called so a
// waiting poll can wake.
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/api/api_error.h"
#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

// What one `poll` reports (docs/control-api.md, "`poll` and long polls").
struct PollReport {
  struct Done {
    int64_t job_id = 0;  // the engine's own
    session::JobResult result;
  };
  std::vector<Done> results;
  std::vector<std::string> failed_requests;
  std::vector<protocol::SlotIndex> released;
};

class EngineJobs {
 public:
  explicit EngineJobs(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}

  // conflict when `job_id` has no delivered result yet.
  Status CheckJobIdFree(int64_t job_id) const;
  // bad_request for a slot named twice, conflict for a slot of a load in flight.
  Status CheckLoadSlots(const std::vector<protocol::SlotIndex>& slots) const;

  // REQUIRES: the checks above passed.
  void AddLoad(int64_t job_id, session::JobId node_job, const std::string& kv_request_id,
               std::vector<protocol::SlotIndex> slots);
  // A store starts pinned; OnStorePinsDropped ends that.
  void AddStore(int64_t job_id, session::JobId node_job, const std::string& kv_request_id);
  // Undoes AddLoad/AddStore of a job that owes no result after all.
  void Remove(int64_t job_id, session::JobId node_job);

  // Results and events; stale or repeated ones (wrong node job) are ignored.
  void OnResult(int64_t job_id, const session::JobResult& result);
  void OnStorePinsDropped(int64_t job_id, session::JobId node_job);
  void OnRequestFailed(const std::string& kv_request_id);
  void OnReleased(protocol::SlotIndex slot);

  bool HasReport() const { return !ready_.empty() || !failed_requests_.empty() || !released_.empty(); }
  // Everything ready; delivered jobs are forgotten.
  PollReport TakeReport();

  // Node job ids of every job not delivered yet.
  std::vector<session::JobId> NodeJobs() const;
  // Forgets everything (the engine has gone).
  void Clear();

  size_t loads_in_flight() const { return loads_in_flight_; }
  size_t size() const { return jobs_.size(); }

 private:
  struct Job {
    session::JobId node_job = 0;
    bool is_load = false;
    std::vector<protocol::SlotIndex> dest_slots;  // loads, until reported
    bool reported = false;
    bool pinned = false;  // stores: some pin still reads a slot
    session::JobResult result;
  };
  void EndLoadSlots(int64_t job_id, Job& job);
  void MaybeReady(int64_t job_id, const Job& job);

  std::function<void()> on_ready_;
  std::map<int64_t, Job> jobs_;
  std::unordered_map<protocol::SlotIndex, int64_t> load_slots_;  // slot -> load job in flight
  size_t loads_in_flight_ = 0;
  std::deque<int64_t> ready_;
  std::vector<std::string> failed_requests_;
  std::set<std::string> failed_set_;
  std::vector<protocol::SlotIndex> released_;
};

}  // namespace kvpeer::daemon
