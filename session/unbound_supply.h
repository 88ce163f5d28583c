// UnboundSupply: the node's holding area for `store` jobs whose
// kv_request_id no peer has fetched yet (the seed manager's `_unbound_stores`;
// docs/edge-cases.md, "The daemon around the sessions", E64).
//
// In disaggregated prefill the producer's engine stores a request's blocks
// before (often long before) the decoder's fetch says which peer wants
// them. Until a session reports that kv_request_id as fetched
// (ServerRole::TakeNewFetchIds), the jobs wait here with their pins; the
// daemon then Takes them and hands them to that session's AddSupply. A job
// that no peer fetches within the timeout (60 s) fails, so the engine's
// slots are never pinned forever by a decoder that never came.
//
// Every job that enters leaves exactly once: by Take, or as a failure
// result from OnTick, Cancel or CancelAll.
//
// Pure logic: time is passed in, nothing is sent.
// Thread-safety: none; used from the daemon's event loop.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::session {

// One parked store job, as given to Add.
struct ParkedStore {
  JobId job_id = 0;
  std::string kv_request_id;
  std::vector<protocol::Key> keys;
  std::vector<PinRef> blocks;
  TimePoint added_at;
};

class UnboundSupply {
 public:
  explicit UnboundSupply(Duration timeout = std::chrono::seconds(60)) : timeout_(timeout) {}

  // Parks a job. REQUIRES: `job_id` is not parked already.
  void Add(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys, std::vector<PinRef> blocks,
           TimePoint now);

  // Removes and returns the jobs parked for `kv_request_id`, oldest first,
  // for the session that received its fetch.
  std::vector<ParkedStore> Take(const std::string& kv_request_id);

  // Fails every job parked for the timeout or longer.
  std::vector<JobResult> OnTick(TimePoint now);
  // Fails the jobs of one request (e.g. its engine went away) / of all
  // (shutdown), with `reason`.
  std::vector<JobResult> Cancel(const std::string& kv_request_id, JobFailure cause, const std::string& reason);
  std::vector<JobResult> CancelAll(JobFailure cause, const std::string& reason);

  // When the oldest parked job times out; none when nothing is parked.
  std::optional<TimePoint> NextDeadline() const;

  size_t size() const { return kv_of_.size(); }
  bool empty() const { return kv_of_.empty(); }
  bool Has(const std::string& kv_request_id) const { return by_kv_.contains(kv_request_id); }

 private:
  // Removes one job from every index; returns it.
  ParkedStore Remove(JobId job_id);

  Duration timeout_;
  std::map<std::string, std::vector<ParkedStore>> by_kv_;
  std::unordered_map<JobId, std::string> kv_of_;
  std::set<std::pair<TimePoint, JobId>> deadlines_;  // exactly the parked jobs
};

}  // namespace kvpeer::session
