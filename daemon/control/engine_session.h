// EngineSession: one engine's state on the node and its control ops
// (docs/control-api.md, "3. Engine session"), from `register_region` to
// `poll`.
//
// A session exists from a successful `hello` until its control connection
// closes. Every op validates the whole request first and only then acts, so
// a rejected request changes nothing. Jobs are keyed by the engine's own
// job ids and live until their result has been delivered by `poll`.
//
// Store results are held back until the peer side has reported the job AND
// every pin of its slots has dropped, so when the engine hears of the result
// no queued frame still reads those slots.
//
// Close() is the engine going away: its requests are finished on every
// peer, its keys withdrawn, its jobs' results dropped. The region stays
// mapped while pins or in-flight loads still hold it.
//
// Thread-safety: none; used from the daemon's one event loop. Owned through
// a shared_ptr (store pins hold weak references to it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/status_or.h"
#include "daemon/api/api_error.h"
#include "daemon/api/control_requests.h"
#include "daemon/node/published_blocks.h"
#include "daemon/control/engine_jobs.h"
#include "daemon/control/engine_registry.h"
#include "daemon/control/lookup_wait.h"
#include "daemon/node/shm_region.h"
#include "base/unique_fd.h"

namespace kvpeer::daemon {

class EngineSession : public std::enable_shared_from_this<EngineSession> {
 public:
  // Created by EngineRegistry::Hello.
  EngineSession(EngineRegistry& registry, EngineId id, std::string client, uint64_t block_len,
                PeerCredentials credentials);
  ~EngineSession();
  EngineSession(const EngineSession&) = delete;
  EngineSession& operator=(const EngineSession&) = delete;

  // Engine ops, each on its request as parsed and validated by
  // daemon/api/request_parsers.h; the control server turns the answers
  // into response fields. `fd` is the descriptor passed with the request's
  // line (SCM_RIGHTS), if any.
  struct RegionAnswer {
    uint64_t region_id = 0;
    uint64_t bytes = 0;
  };
  StatusOr<RegionAnswer> RegisterRegion(const RegisterRegionRequest& request, UniqueFd fd);
  // Unsealed publish; the number of keys published. A sealed one (`seal:
  // true`) is PublishSealed: its slots are hashed off the event loop first
  // (docs/security.md, "One request may not hold the event loop").
  StatusOr<size_t> Publish(const PublishRequest& request);
  boost::asio::awaitable<StatusOr<size_t>> PublishSealed(PublishRequest request);
  UnpublishResult Unpublish(const UnpublishRequest& request);
  using ProbeAnswers = std::vector<session::ProbeAnswer>;
  // With `wait_ms` the probe is flushed at once and the answer waits until
  // no key is `retry`, the time passes, the peer's session or the request
  // there ends, or waits are cut.
  boost::asio::awaitable<StatusOr<ProbeAnswers>> Lookup(LookupRequest request);
  // Lookup answered at once: one pass of the probe. With `wait_ms` and a
  // key still `retry` (and waits not cut) answers nullopt instead: Lookup
  // then goes on from this pass and waits.
  StatusOr<std::optional<ProbeAnswers>> LookupNow(const LookupRequest& request);
  // The number of probe frames sent.
  StatusOr<size_t> Flush();
  Status Load(LoadRequest request);
  Status Store(StoreRequest request);
  // A store with `seal: true`: hashed off the loop, as PublishSealed.
  boost::asio::awaitable<Status> StoreSealed(StoreRequest request);
  Status Finish(const FinishRequest& request);
  // Waits up to `wait_ms` for something to report unless something already
  // is (or waits are cut, see CutWaits).
  boost::asio::awaitable<PollReport> Poll(PollRequest request);
  // Poll answered at once. With `wait_ms` and nothing to report (and waits
  // not cut) answers nullopt instead: Poll then waits.
  std::optional<PollReport> PollNow(const PollRequest& request);

  // From now on polls do not wait, and a waiting poll returns at once: the
  // connection has seen end of input, so nobody may be left to wait for.
  void CutWaits();
  // The engine went away. Idempotent.
  void Close();

  // From the registry.
  void OnLoadResult(int64_t engine_job, const session::JobResult& result) { jobs_.OnResult(engine_job, result); }
  void OnStoreResult(int64_t engine_job, const session::JobResult& result) { jobs_.OnResult(engine_job, result); }
  void OnRequestFailed(const std::string& kv_request_id) {
    jobs_.OnRequestFailed(kv_request_id);
    lookup_wait_.OnRequestFailed(kv_request_id);
  }
  // Probe answers from `peer` may have changed (ResultSink::OnProbesChanged).
  void OnProbesChanged(const std::string& peer, bool ended) { lookup_wait_.OnProbesChanged(peer, ended); }

  EngineId id() const { return id_; }
  const std::string& client() const { return client_; }
  const PeerCredentials& credentials() const { return credentials_; }
  uint32_t num_blocks() const { return region_ ? region_->num_blocks() : 0; }
  size_t loads_in_flight() const { return jobs_.loads_in_flight(); }
  // Jobs whose result `poll` has not delivered yet (metrics).
  size_t jobs_pending() const { return jobs_.size(); }

 private:
  // Finishes this engine's halves of `kv_request_id` on the peer side.
  void FinishOnPeers(PeerService& peers, const std::string& kv_request_id) const;
  // A store's pins all hold one guard; its destruction means they dropped.
  class StoreGuard;

  // One pass of the probe: what a lookup without wait_ms does.
  StatusOr<ProbeAnswers> Probe(const LookupRequest& request, bool flush);
  // Re-probes on every event of lookup_wait_ until no answer is retry.
  boost::asio::awaitable<StatusOr<ProbeAnswers>> AwaitAnswers(const LookupRequest& request, ProbeAnswers answers);

  // no_region naming `op` without a region.
  Status CheckRegion(std::string_view op) const;
  // The slots of `block_ids`: the region present (no_region), each id in
  // range (out_of_range).
  StatusOr<std::vector<protocol::SlotIndex>> Slots(std::string_view op, const std::vector<uint64_t>& block_ids) const;
  // The seals of `slots`' distinct slots, hashed on the registry's worker;
  // conflict naming --max-seal-bytes when they are too many bytes, and
  // unavailable when the engine went away meanwhile.
  boost::asio::awaitable<StatusOr<SlotSeals>> HashSeals(std::string_view op,
                                                        const std::vector<protocol::SlotIndex>& slots);
  // What load and store check after their fields, in one order: the peer
  // side running, the region, the slots, the job id free.
  StatusOr<std::vector<protocol::SlotIndex>> CheckJob(std::string_view op, int64_t job_id,
                                                      const std::vector<uint64_t>& block_ids) const;
  // conflict naming the first of `slots` with live pins of this engine.
  Status CheckSlotsUnpinned(const std::vector<protocol::SlotIndex>& slots) const;
  // conflict when another engine of the node uses the request towards `peer`.
  Status CheckKvFree(const std::string& peer, const std::string& kv_request_id) const;
  // conflict when another engine of the node supplies `kv_request_id`.
  Status CheckSupplyFree(const std::string& kv_request_id) const;
  // The checks and the work of a store whose seals (if sealed) are known.
  Status StartStore(StoreRequest& request, const std::vector<protocol::SlotIndex>& slots, const SlotSeals* seals);
  // What one open request costs against --max-open-request-bytes, once for
  // the request and once per peer it names: the id is held about twice in
  // each (this session's and the registry's tables, the peer side's request
  // state; measured: ~10 KB per 2 KiB-id lookup), plus fixed bookkeeping.
  static uint64_t RequestCost(const std::string& kv_request_id) { return 2 * kv_request_id.size() + 512; }
  // conflict naming --max-open-request-bytes when `kv_request_id` is new to
  // this engine (or to `peer`) and would pass the bound.
  Status CheckRequestRoom(const std::string& kv_request_id, const std::string* peer) const;
  // kv_ids_ with the byte count kept in step.
  void OpenRequest(const std::string& kv_request_id);
  void CloseRequest(const std::string& kv_request_id);
  // Claims (peer, kv_request_id) for this engine; true when newly claimed.
  bool Claim(const std::string& peer, const std::string& kv_request_id);
  void Unclaim(const std::string& peer, const std::string& kv_request_id);
  PeerService* Peers() const { return registry_.peer_service(); }
  void Wake();

  EngineRegistry& registry_;
  const EngineId id_;
  const std::string client_;
  const uint64_t block_len_;
  const PeerCredentials credentials_;
  std::shared_ptr<ShmRegion> region_;
  uint64_t region_id_ = 0;
  bool closed_ = false;

  EngineJobs jobs_;
  std::set<std::string> kv_ids_;         // every request used; finished on Close
  std::set<std::string> stored_kv_ids_;  // requests this engine supplied (producer)
  // kv_request_id -> the peers it is claimed towards in the registry. Keyed
  // by request so that finish touches only its own claims (a burst of
  // thousands of requests would otherwise scan them all per finish).
  std::unordered_map<std::string, std::set<std::string>> kv_claims_;
  // RequestCost of every kv_ids_ and kv_claims_ entry.
  uint64_t open_request_bytes_ = 0;

  boost::asio::steady_timer poll_timer_;
  bool poll_waiting_ = false;
  // The pass LookupNow made before it set must_wait; the Lookup that the
  // same request goes to next starts from it instead of probing again.
  std::optional<ProbeAnswers> first_pass_;
  bool waits_cut_ = false;
  LookupWait lookup_wait_;
};

}  // namespace kvpeer::daemon
