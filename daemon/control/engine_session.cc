#include "daemon/control/engine_session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

namespace kvpeer::daemon {

using protocol::SlotIndex;

namespace {

Status PeerSideMissing() { return Status::Internal("the peer side of the daemon is not running"); }

bool HasRetry(const EngineSession::ProbeAnswers& answers) {
  for (session::ProbeAnswer answer : answers) {
    if (answer == session::ProbeAnswer::kRetry) return true;
  }
  return false;
}

}  // namespace

// Held by every pin of one store job; when the last pin drops, the job's
// slots are no longer read by anything.
class EngineSession::StoreGuard {
 public:
  StoreGuard(std::weak_ptr<EngineSession> session, int64_t engine_job, session::JobId node_job)
      : session_(std::move(session)), engine_job_(engine_job), node_job_(node_job) {}
  ~StoreGuard() {
    if (auto session = session_.lock()) session->jobs_.OnStorePinsDropped(engine_job_, node_job_);
  }

 private:
  std::weak_ptr<EngineSession> session_;
  int64_t engine_job_;
  session::JobId node_job_;
};

EngineSession::EngineSession(EngineRegistry& registry, EngineId id, std::string client, uint64_t block_len,
                             PeerCredentials credentials)
    : registry_(registry),
      id_(id),
      client_(std::move(client)),
      block_len_(block_len),
      credentials_(credentials),
      jobs_([this] { Wake(); }),
      poll_timer_(registry.executor()),
      lookup_wait_(registry.executor()) {}

EngineSession::~EngineSession() { Close(); }

StatusOr<EngineSession::RegionAnswer> EngineSession::RegisterRegion(const RegisterRegionRequest& request, UniqueFd fd) {
  const bool use_fd = request.by_fd();
  const uint64_t num_blocks = request.num_blocks;
  if (use_fd && !fd.valid()) {
    return Status::Invalid(
        "'fd': true but no file descriptor came with this line (send it with "
        "SCM_RIGHTS in the same sendmsg as the line's first byte)");
  }
  if (region_) {
    return Status::Conflict("a region (region_id " + std::to_string(region_id_) +
                            ") is already registered; one region per engine session");
  }
  const RegionShape shape{num_blocks, block_len_, request.offset};
  // The mapped size counts against --max-region-bytes, checked before
  // anything is opened: a sparse file costs no disk but its whole size in
  // address space. (An overflowing size is refused by the mapping below.)
  std::shared_ptr<const void> charge;
  uint64_t bytes = 0;
  if (!__builtin_mul_overflow(num_blocks, block_len_, &bytes)) {
    StatusOr<std::shared_ptr<const void>> charged = registry_.ChargeRegion(bytes);
    if (!charged.ok()) return charged.status();
    charge = std::move(*charged);
  }
  std::shared_ptr<ShmRegion> region;
  Status mapped;
  if (use_fd) {
    mapped = ShmRegion::MapFd(fd.get(), shape, &region);
  } else {
    // The file must be the engine's own (SO_PEERCRED uid): the daemon may
    // run with more rights than the engine and must not serve files the
    // engine could not read itself.
    mapped = ShmRegion::MapPath(*request.path, shape, credentials_.uid, &region);
  }
  if (!mapped.ok()) return mapped;
  region->Hold(std::move(charge));

  region_ = std::move(region);
  region_id_ = id_;
  std::weak_ptr<EngineSession> weak = weak_from_this();
  registry_.index().AddEngine(id_, region_, [weak](SlotIndex slot) {
    if (auto session = weak.lock(); session && !session->closed_) session->jobs_.OnReleased(slot);
  });
  spdlog::info("engine {} '{}' registered {} blocks of {} bytes ({})", id_, client_, num_blocks, block_len_,
               use_fd ? "passed descriptor" : *request.path);
  return RegionAnswer{region_id_, region_->bytes()};
}

Status EngineSession::CheckRegion(std::string_view op) const {
  if (region_) return Status::Ok();
  return Status::NoRegion(std::string(op) + " needs a region: send register_region first");
}

StatusOr<std::vector<SlotIndex>> EngineSession::Slots(std::string_view op,
                                                      const std::vector<uint64_t>& block_ids) const {
  if (Status bad = CheckRegion(op); !bad.ok()) return bad;
  std::vector<SlotIndex> slots;
  slots.reserve(block_ids.size());
  for (size_t i = 0; i < block_ids.size(); ++i) {
    if (block_ids[i] >= region_->num_blocks()) {
      return Status::OutOfRange("block_ids[" + std::to_string(i) + "] is " + std::to_string(block_ids[i]) +
                                ", not below the region's num_blocks " + std::to_string(region_->num_blocks()));
    }
    slots.push_back(static_cast<SlotIndex>(block_ids[i]));
  }
  return slots;
}

Status EngineSession::CheckKvFree(const std::string& peer, const std::string& kv_request_id) const {
  std::optional<EngineId> user = registry_.KvUser(peer, kv_request_id);
  if (!user || *user == id_) return Status::Ok();
  return Status::Conflict("kv_request_id '" + kv_request_id + "' towards peer " + peer +
                          " is in use by another engine of this node");
}

bool EngineSession::Claim(const std::string& peer, const std::string& kv_request_id) {
  if (!registry_.ClaimKv(peer, kv_request_id, id_)) return false;
  if (kv_claims_[kv_request_id].insert(peer).second) open_request_bytes_ += RequestCost(kv_request_id);
  return true;
}

void EngineSession::Unclaim(const std::string& peer, const std::string& kv_request_id) {
  registry_.ReleaseKv(peer, kv_request_id);
  auto claims = kv_claims_.find(kv_request_id);
  if (claims == kv_claims_.end()) return;
  if (claims->second.erase(peer) > 0) open_request_bytes_ -= RequestCost(kv_request_id);
  if (claims->second.empty()) kv_claims_.erase(claims);
}

Status EngineSession::CheckRequestRoom(const std::string& kv_request_id, const std::string* peer) const {
  const uint64_t bound = registry_.engine_limits().max_open_request_bytes;
  if (bound == 0) return Status::Ok();
  const uint64_t cost = RequestCost(kv_request_id);
  uint64_t more = kv_ids_.contains(kv_request_id) ? 0 : cost;
  if (peer != nullptr) {
    auto claims = kv_claims_.find(kv_request_id);
    if (claims == kv_claims_.end() || !claims->second.contains(*peer)) more += cost;
  }
  if (more == 0 || open_request_bytes_ + more <= bound) return Status::Ok();
  return registry_.RefuseLimit(Counter::kLimitMaxOpenRequestBytes, "request of engine '" + client_ + "'",
                               "max-open-request-bytes (" + std::to_string(bound) + ") reached: this engine's " +
                                   std::to_string(kv_ids_.size()) + " unfinished requests take " +
                                   std::to_string(open_request_bytes_) +
                                   " bytes (twice the id's bytes plus 512, per request and per peer it names); "
                                   "finish requests first");
}

void EngineSession::OpenRequest(const std::string& kv_request_id) {
  if (kv_ids_.insert(kv_request_id).second) open_request_bytes_ += RequestCost(kv_request_id);
}

void EngineSession::CloseRequest(const std::string& kv_request_id) {
  if (kv_ids_.erase(kv_request_id) > 0) open_request_bytes_ -= RequestCost(kv_request_id);
}

StatusOr<size_t> EngineSession::Publish(const PublishRequest& request) {
  StatusOr<std::vector<SlotIndex>> slots = Slots("publish", request.block_ids);
  if (!slots.ok()) return slots.status();
  if (request.seal) return Status::Internal("a sealed publish must take the hashing path");
  if (Status refused = registry_.index().Publish(id_, request.keys, *slots); !refused.ok()) return refused;
  return request.keys.size();
}

boost::asio::awaitable<StatusOr<size_t>> EngineSession::PublishSealed(PublishRequest request) {
  StatusOr<std::vector<SlotIndex>> slots = Slots("publish", request.block_ids);
  if (!slots.ok()) co_return slots.status();
  std::optional<SlotSeals> seals;
  if (request.seal) {
    StatusOr<SlotSeals> hashed = co_await HashSeals("publish", *slots);
    if (!hashed.ok()) co_return hashed.status();
    seals = std::move(*hashed);
  }
  Status refused = registry_.index().Publish(id_, request.keys, *slots, seals ? &*seals : nullptr);
  if (!refused.ok()) co_return refused;
  co_return request.keys.size();
}

boost::asio::awaitable<StatusOr<SlotSeals>> EngineSession::HashSeals(std::string_view op,
                                                                     const std::vector<SlotIndex>& slots) {
  // Each slot once, however often the request names it.
  std::vector<SlotIndex> distinct(slots);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const uint64_t bytes = distinct.size() * block_len_;
  const uint64_t bound = registry_.engine_limits().max_seal_bytes;
  if (bound != 0 && bytes > bound) {
    co_return registry_.RefuseLimit(Counter::kLimitMaxSealBytes, std::string(op) + " of engine '" + client_ + "'",
                                    "max-seal-bytes (" + std::to_string(bound) + ") reached: sealing " +
                                        std::to_string(distinct.size()) + " distinct block ids of " +
                                        std::to_string(block_len_) + " bytes hashes " + std::to_string(bytes) +
                                        " bytes; seal fewer blocks per request");
  }
  std::shared_ptr<ShmRegion> region = region_;
  SlotSeals seals = co_await registry_.seal_hasher().Hash(std::move(region), std::move(distinct));
  registry_.counters().Add(Counter::kSealBytesHashed, bytes);
  // The engine may have gone, or (being sequential on its connection) done
  // nothing else meanwhile.
  if (closed_) co_return Status::Unavailable("the engine session closed while its blocks were hashed");
  co_return seals;
}

UnpublishResult EngineSession::Unpublish(const UnpublishRequest& request) {
  return registry_.index().Unpublish(id_, request.keys);
}

boost::asio::awaitable<StatusOr<EngineSession::ProbeAnswers>> EngineSession::Lookup(LookupRequest request) {
  ProbeAnswers answers;
  if (first_pass_) {
    answers = std::move(*first_pass_);  // LookupNow's pass of this very request
    first_pass_.reset();
  } else {
    // control-api.md, the `lookup` row: with wait_ms the probe is sent at once.
    StatusOr<ProbeAnswers> pass = Probe(request, request.flush || request.wait_ms > 0);
    if (!pass.ok()) co_return pass.status();
    answers = std::move(*pass);
  }
  if (request.wait_ms > 0 && HasRetry(answers) && !waits_cut_) {
    co_return co_await AwaitAnswers(request, std::move(answers));
  }
  co_return answers;
}

StatusOr<std::optional<EngineSession::ProbeAnswers>> EngineSession::LookupNow(const LookupRequest& request) {
  first_pass_.reset();  // never another request's
  StatusOr<ProbeAnswers> answers = Probe(request, request.flush || request.wait_ms > 0);
  if (!answers.ok()) return answers.status();
  if (request.wait_ms > 0 && HasRetry(*answers) && !waits_cut_) {
    first_pass_ = std::move(*answers);  // Lookup goes on from this pass and waits
    return std::optional<ProbeAnswers>();
  }
  return std::optional<ProbeAnswers>(std::move(*answers));
}

StatusOr<EngineSession::ProbeAnswers> EngineSession::Probe(const LookupRequest& args, bool flush) {
  PeerService* peers = Peers();
  if (peers == nullptr) return PeerSideMissing();
  if (Status busy = CheckKvFree(args.peer, args.kv_request_id); !busy.ok()) return busy;
  if (Status full = CheckRequestRoom(args.kv_request_id, &args.peer); !full.ok()) return full;

  // Claimed before the call, undone if it fails: a failure the peer side
  // reports later (through its outbox, after this op) finds the claim.
  const bool claimed = Claim(args.peer, args.kv_request_id);
  ProbeAnswers answers;
  if (Status failed = peers->Lookup(args.peer, args.kv_request_id, args.keys, flush, &answers); !failed.ok()) {
    if (claimed) Unclaim(args.peer, args.kv_request_id);
    return failed;
  }
  OpenRequest(args.kv_request_id);
  if (answers.size() != args.keys.size()) {
    return Status::Internal("the peer side answered " + std::to_string(answers.size()) + " of " +
                            std::to_string(args.keys.size()) + " probes");
  }
  return answers;
}

// Each event re-asks the peer side exactly as the engine's next plain
// lookup would; the wait ends once nothing is retry, on time-out, or when
// the peer's session or the request ended (then that one answer stands:
// miss or retry per the wire spec's section 1, or the shutdown error).
boost::asio::awaitable<StatusOr<EngineSession::ProbeAnswers>> EngineSession::AwaitAnswers(const LookupRequest& request,
                                                                                          ProbeAnswers answers) {
  lookup_wait_.Begin(request.peer, request.kv_request_id,
                     std::chrono::steady_clock::now() + std::chrono::milliseconds(request.wait_ms));
  Status status;
  for (;;) {
    const LookupWait::Wake wake = co_await lookup_wait_.Next();
    if (wake == LookupWait::Wake::kCut || closed_) break;  // the answers so far stand
    StatusOr<ProbeAnswers> pass = Probe(request, false);
    if (!pass.ok()) {
      status = pass.status();
      break;
    }
    answers = std::move(*pass);
    if (wake != LookupWait::Wake::kAnswers || !HasRetry(answers)) break;
  }
  lookup_wait_.End();
  if (!status.ok()) co_return status;
  co_return answers;
}

StatusOr<size_t> EngineSession::Flush() {
  PeerService* peers = Peers();
  if (peers == nullptr) return PeerSideMissing();
  return peers->FlushLookups();
}

// What load and store check after their fields, in one order for both.
StatusOr<std::vector<SlotIndex>> EngineSession::CheckJob(std::string_view op, int64_t job_id,
                                                         const std::vector<uint64_t>& block_ids) const {
  if (Peers() == nullptr) return PeerSideMissing();
  StatusOr<std::vector<SlotIndex>> slots = Slots(op, block_ids);
  if (!slots.ok()) return slots;
  if (Status taken = jobs_.CheckJobIdFree(job_id); !taken.ok()) return taken;
  return slots;
}

// docs/control-api.md section 2 ("conflict"): a pinned slot is being read,
// by a peer's round that hit a key published there or by a store job
// without its result. Loading into it would serve that peer the new bytes
// under the old key (issue 11, finding 5). One index lookup per slot.
Status EngineSession::CheckSlotsUnpinned(const std::vector<SlotIndex>& slots) const {
  for (SlotIndex slot : slots) {
    if (registry_.index().live_pins(id_, slot) == 0) continue;
    return Status::Conflict(
        "block id " + std::to_string(slot) +
        " is pinned: a peer's transfer is reading it, or it is a slot of a store job still without "
        "its result; unpublish its key and load into it once a poll's `released` event names it, or "
        "once the store's result has arrived");
  }
  return Status::Ok();
}

Status EngineSession::Load(LoadRequest request) {
  StatusOr<std::vector<SlotIndex>> checked = CheckJob("load", request.job_id, request.block_ids);
  if (!checked.ok()) return checked.status();
  PeerService* peers = Peers();
  const int64_t job_id = request.job_id;
  const std::string& peer = request.peer;
  const std::string& kv_request_id = request.kv_request_id;
  std::vector<SlotIndex>& slots = *checked;
  if (Status busy = jobs_.CheckLoadSlots(slots); !busy.ok()) return busy;
  if (Status busy = CheckSlotsUnpinned(slots); !busy.ok()) return busy;
  if (Status busy = CheckKvFree(peer, kv_request_id); !busy.ok()) return busy;
  if (Status full = CheckRequestRoom(kv_request_id, &peer); !full.ok()) return full;

  // The route exists before the call and goes if it fails (no result is
  // owed then). The result itself never arrives during the call: the peer
  // side queues results and drains them after this op (result_outbox.h).
  const session::JobId node_job = registry_.AddRoute(id_, job_id);
  jobs_.AddLoad(job_id, node_job, kv_request_id, slots);
  const bool claimed = Claim(peer, kv_request_id);
  Status failed =
      peers->Load(node_job, peer, kv_request_id, std::move(request.keys), std::move(slots), MakeSlotSink(region_));
  if (!failed.ok()) {
    // No result is owed: undo everything this request did.
    registry_.DropRoute(node_job);
    jobs_.Remove(job_id, node_job);
    if (claimed) Unclaim(peer, kv_request_id);
    return failed;
  }
  OpenRequest(kv_request_id);
  registry_.counters().Add(Counter::kLoadsSubmitted);
  return Status::Ok();
}

Status EngineSession::Store(StoreRequest request) {
  StatusOr<std::vector<SlotIndex>> slots = CheckJob("store", request.job_id, request.block_ids);
  if (!slots.ok()) return slots.status();
  if (request.seal) return Status::Internal("a sealed store must take the hashing path");
  return StartStore(request, *slots, nullptr);
}

boost::asio::awaitable<Status> EngineSession::StoreSealed(StoreRequest request) {
  StatusOr<std::vector<SlotIndex>> slots = CheckJob("store", request.job_id, request.block_ids);
  if (!slots.ok()) co_return slots.status();
  std::optional<SlotSeals> seals;
  if (request.seal) {
    // The checks that need no hashing come first, so a refused store costs
    // nothing; StartStore makes them again after (cheap, and exact).
    if (Status busy = CheckSupplyFree(request.kv_request_id); !busy.ok()) co_return busy;
    if (Status full = CheckRequestRoom(request.kv_request_id, nullptr); !full.ok()) co_return full;
    StatusOr<SlotSeals> hashed = co_await HashSeals("store", *slots);
    if (!hashed.ok()) co_return hashed.status();
    seals = std::move(*hashed);
    // Nothing of this engine ran meanwhile (its requests are answered in
    // order), but a job id may have been delivered: checked again.
    if (Status taken = jobs_.CheckJobIdFree(request.job_id); !taken.ok()) co_return taken;
  }
  co_return StartStore(request, *slots, seals ? &*seals : nullptr);
}

Status EngineSession::CheckSupplyFree(const std::string& kv_request_id) const {
  std::optional<EngineId> owner = registry_.SupplyOwner(kv_request_id);
  if (!owner || *owner == id_) return Status::Ok();
  return Status::Conflict("kv_request_id '" + kv_request_id +
                          "' has supply from another engine of this node; a request's supply is its engine's");
}

Status EngineSession::StartStore(StoreRequest& request, const std::vector<SlotIndex>& slots, const SlotSeals* seals) {
  PeerService* peers = Peers();
  if (peers == nullptr) return PeerSideMissing();
  const int64_t job_id = request.job_id;
  const std::string& kv_request_id = request.kv_request_id;
  if (Status busy = CheckSupplyFree(kv_request_id); !busy.ok()) return busy;
  if (Status full = CheckRequestRoom(kv_request_id, nullptr); !full.ok()) return full;

  registry_.ClaimSupply(kv_request_id, id_);
  const session::JobId node_job = registry_.AddRoute(id_, job_id);
  jobs_.AddStore(job_id, node_job, kv_request_id);
  OpenRequest(kv_request_id);
  stored_kv_ids_.insert(kv_request_id);
  std::vector<session::PinRef> pins;
  {
    auto guard = std::make_shared<StoreGuard>(weak_from_this(), job_id, node_job);
    for (SlotIndex slot : slots) {
      std::optional<uint64_t> sealed = seals != nullptr ? seals->at(slot) : std::nullopt;
      pins.push_back(registry_.index().Pin(id_, slot, guard, sealed));
    }
  }  // from here on only the pins hold the guard
  registry_.counters().Add(Counter::kStoresSubmitted);
  peers->Store(node_job, kv_request_id, std::move(request.keys), std::move(pins));
  return Status::Ok();
}

Status EngineSession::Finish(const FinishRequest& request) {
  const std::string& kv_request_id = request.kv_request_id;
  PeerService* peers = Peers();
  if (peers == nullptr) return PeerSideMissing();
  FinishOnPeers(*peers, kv_request_id);
  // The request is over on every peer: another engine may use its id now.
  if (auto claims = kv_claims_.find(kv_request_id); claims != kv_claims_.end()) {
    for (const std::string& peer : claims->second) registry_.ReleaseKv(peer, kv_request_id);
    open_request_bytes_ -= claims->second.size() * (RequestCost(kv_request_id));
    kv_claims_.erase(claims);
  }
  CloseRequest(kv_request_id);
  if (stored_kv_ids_.erase(kv_request_id) > 0) registry_.ReleaseSupply(kv_request_id, id_);
  return Status::Ok();
}

void EngineSession::FinishOnPeers(PeerService& peers, const std::string& kv_request_id) const {
  std::vector<std::string> client_peers;
  if (auto claims = kv_claims_.find(kv_request_id); claims != kv_claims_.end()) {
    client_peers.assign(claims->second.begin(), claims->second.end());
  }
  peers.Finish(kv_request_id, client_peers, stored_kv_ids_.contains(kv_request_id));
}

std::optional<PollReport> EngineSession::PollNow(const PollRequest& request) {
  if (request.wait_ms > 0 && !jobs_.HasReport() && !waits_cut_) return std::nullopt;
  return jobs_.TakeReport();
}

boost::asio::awaitable<PollReport> EngineSession::Poll(PollRequest request) {
  if (request.wait_ms > 0 && !jobs_.HasReport() && !waits_cut_) {
    poll_timer_.expires_after(std::chrono::milliseconds(request.wait_ms));
    poll_waiting_ = true;
    boost::system::error_code ec;  // operation_aborted = woken early
    co_await poll_timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    poll_waiting_ = false;
  }
  co_return jobs_.TakeReport();
}

void EngineSession::Wake() {
  if (poll_waiting_) poll_timer_.cancel();
}

void EngineSession::CutWaits() {
  waits_cut_ = true;
  Wake();
  lookup_wait_.Cut();
}

void EngineSession::Close() {
  if (closed_) return;
  closed_ = true;
  CutWaits();
  // Stop routing first: whatever the peer side reports from here on,
  // including the failures Finish causes, is dropped (nobody can poll it).
  registry_.Unregister(id_);
  registry_.index().RemoveEngine(id_);
  for (session::JobId node_job : jobs_.NodeJobs()) registry_.DropRoute(node_job);
  const size_t open_jobs = jobs_.size();
  jobs_.Clear();
  const std::set<std::string> requests = std::move(kv_ids_);
  kv_ids_.clear();
  // Ends this engine's in-flight loads and probes on the peers it used, and
  // what it produces on every peer; other engines' use of an id is untouched.
  if (PeerService* peers = Peers()) {
    for (const std::string& kv_request_id : requests) FinishOnPeers(*peers, kv_request_id);
  }
  for (const auto& [kv_request_id, claimed_peers] : kv_claims_) {
    for (const std::string& peer : claimed_peers) registry_.ReleaseKv(peer, kv_request_id);
  }
  kv_claims_.clear();
  open_request_bytes_ = 0;
  for (const std::string& kv_request_id : stored_kv_ids_) registry_.ReleaseSupply(kv_request_id, id_);
  stored_kv_ids_.clear();
  // In-flight loads and pins keep the mapping until they end.
  region_.reset();
  spdlog::info("engine {} '{}' (pid {}) closed: {} requests finished, {} jobs dropped", id_, client_, credentials_.pid,
               requests.size(), open_jobs);
}

}  // namespace kvpeer::daemon
