#include "daemon/control/engine_session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "daemon/api/json_request.h"

namespace kvpeer::daemon {

namespace json = boost::json;
using protocol::SlotIndex;

namespace {

constexpr uint64_t kMaxNumBlocks = uint64_t{1} << 31;
constexpr uint64_t kMaxWaitMs = 60000;
constexpr size_t kMaxPathChars = 4096;

Status PeerSideMissing() { return Status::Internal("the peer side of the daemon is not running"); }

const char* AnswerName(session::ProbeAnswer answer) {
  switch (answer) {
    case session::ProbeAnswer::kHit:
      return "hit";
    case session::ProbeAnswer::kMiss:
      return "miss";
    case session::ProbeAnswer::kRetry:
      return "retry";
  }
  return "retry";
}

bool HasRetry(const std::vector<session::ProbeAnswer>& answers) {
  for (session::ProbeAnswer answer : answers) {
    if (answer == session::ProbeAnswer::kRetry) return true;
  }
  return false;
}

json::array ToArray(const std::vector<SlotIndex>& items) { return json::array(items.begin(), items.end()); }

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

Status EngineSession::RegisterRegion(const json::object& request, UniqueFd fd, json::object* response) {
  RequestReader reader(request);
  std::optional<bool> by_fd;
  std::optional<std::string> path;
  std::optional<uint64_t> offset;
  uint64_t num_blocks = 0;
  reader.OptionalBool("fd", &by_fd);
  reader.OptionalString("path", 1, kMaxPathChars, &path);
  reader.Uint("num_blocks", kMaxNumBlocks, &num_blocks);
  reader.OptionalUint("offset", std::numeric_limits<uint64_t>::max(), &offset);
  if (!reader.ok()) return reader.status();
  const bool use_fd = by_fd.value_or(false);
  if (use_fd == path.has_value()) {
    return Status::Invalid(use_fd ? "give either 'path' or 'fd': true, not both"
                                  : "field 'path' is required (or 'fd': true with the descriptor "
                                    "passed with this line via SCM_RIGHTS)");
  }
  if (num_blocks == 0) return Status::Invalid("field 'num_blocks' must be at least 1, is 0");
  if (use_fd && !fd.valid()) {
    return Status::Invalid(
        "'fd': true but no file descriptor came with this line (send it with "
        "SCM_RIGHTS in the same sendmsg as the line's first byte)");
  }
  if (region_) {
    return Status::Conflict("a region (region_id " + std::to_string(region_id_) +
                            ") is already registered; one region per engine session");
  }
  const RegionShape shape{num_blocks, block_len_, offset.value_or(0)};
  // The mapped size counts against --max-region-bytes, checked before
  // anything is opened: a sparse file costs no disk but its whole size in
  // address space. (An overflowing size is refused by the mapping below.)
  std::shared_ptr<const void> charge;
  uint64_t bytes = 0;
  if (!__builtin_mul_overflow(num_blocks, block_len_, &bytes)) {
    if (Status full = registry_.ChargeRegion(bytes, &charge); !full.ok()) return full;
  }
  std::shared_ptr<ShmRegion> region;
  Status mapped;
  if (use_fd) {
    mapped = ShmRegion::MapFd(fd.get(), shape, &region);
  } else {
    // The file must be the engine's own (SO_PEERCRED uid): the daemon may
    // run with more rights than the engine and must not serve files the
    // engine could not read itself.
    mapped = ShmRegion::MapPath(*path, shape, credentials_.uid, &region);
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
               use_fd ? "passed descriptor" : *path);
  (*response)["region_id"] = region_id_;
  (*response)["bytes"] = region_->bytes();
  return Status::Ok();
}

Status EngineSession::CheckRegion(std::string_view op) const {
  if (region_) return Status::Ok();
  return Status::NoRegion(std::string(op) + " needs a region: send register_region first");
}

Status EngineSession::CheckBlockIds(const std::vector<uint64_t>& block_ids, std::vector<SlotIndex>* slots) const {
  slots->clear();
  slots->reserve(block_ids.size());
  for (size_t i = 0; i < block_ids.size(); ++i) {
    if (block_ids[i] >= region_->num_blocks()) {
      return Status::OutOfRange("block_ids[" + std::to_string(i) + "] is " + std::to_string(block_ids[i]) +
                                ", not below the region's num_blocks " + std::to_string(region_->num_blocks()));
    }
    slots->push_back(static_cast<SlotIndex>(block_ids[i]));
  }
  return Status::Ok();
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

Status EngineSession::ReadPublish(const json::object& request, PublishRequest* publish) const {
  RequestReader reader(request);
  std::vector<uint64_t> block_ids;
  reader.Keys("keys", 0, &publish->keys);
  reader.BlockIds("block_ids", 0, &block_ids);
  std::optional<bool> seal;
  reader.OptionalBool("seal", &seal);
  reader.SameLength("block_ids", block_ids.size(), "keys", publish->keys.size());
  if (!reader.ok()) return reader.status();
  publish->seal = seal.value_or(false);
  if (Status bad = CheckRegion("publish"); !bad.ok()) return bad;
  return CheckBlockIds(block_ids, &publish->slots);
}

Status EngineSession::Publish(const json::object& request, json::object* response) {
  PublishRequest publish;
  if (Status bad = ReadPublish(request, &publish); !bad.ok()) return bad;
  if (publish.seal) return Status::Internal("a sealed publish must take the hashing path");
  if (Status refused = registry_.index().Publish(id_, publish.keys, publish.slots); !refused.ok()) return refused;
  (*response)["published"] = publish.keys.size();
  return Status::Ok();
}

boost::asio::awaitable<Status> EngineSession::PublishSealed(const json::object& request, json::object* response) {
  PublishRequest publish;
  if (Status bad = ReadPublish(request, &publish); !bad.ok()) co_return bad;
  SlotSeals seals;
  if (publish.seal) {
    if (Status failed = co_await HashSeals("publish", publish.slots, &seals); !failed.ok()) co_return failed;
  }
  Status refused = registry_.index().Publish(id_, publish.keys, publish.slots, publish.seal ? &seals : nullptr);
  if (!refused.ok()) co_return refused;
  (*response)["published"] = publish.keys.size();
  co_return Status::Ok();
}

boost::asio::awaitable<Status> EngineSession::HashSeals(std::string_view op, const std::vector<SlotIndex>& slots,
                                                        SlotSeals* seals) {
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
  *seals = co_await registry_.seal_hasher().Hash(std::move(region), std::move(distinct));
  registry_.counters().Add(Counter::kSealBytesHashed, bytes);
  // The engine may have gone, or (being sequential on its connection) done
  // nothing else meanwhile.
  if (closed_) co_return Status::Unavailable("the engine session closed while its blocks were hashed");
  co_return Status::Ok();
}

Status EngineSession::Unpublish(const json::object& request, json::object* response) {
  RequestReader reader(request);
  std::vector<protocol::Key> keys;
  reader.Keys("keys", 0, &keys);
  if (!reader.ok()) return reader.status();
  UnpublishResult result = registry_.index().Unpublish(id_, keys);
  (*response)["released"] = ToArray(result.released);
  (*response)["pinned"] = ToArray(result.pinned);
  return Status::Ok();
}

Status EngineSession::ReadLookup(const json::object& request, LookupArgs* args) const {
  RequestReader reader(request);
  std::optional<bool> flush;
  std::optional<uint64_t> wait_ms;
  reader.Peer("peer", &args->peer);
  reader.IdString("kv_request_id", &args->kv_request_id);
  reader.Keys("keys", 0, &args->keys);
  reader.OptionalBool("flush", &flush);
  reader.OptionalUint("wait_ms", kMaxWaitMs, &wait_ms);
  args->flush = flush.value_or(false);
  args->wait_ms = wait_ms.value_or(0);
  return reader.status();
}

boost::asio::awaitable<Status> EngineSession::Lookup(const json::object& request, json::object* response) {
  LookupArgs args;
  if (Status bad = ReadLookup(request, &args); !bad.ok()) co_return bad;
  std::vector<session::ProbeAnswer> answers;
  if (first_pass_) {
    answers = std::move(*first_pass_);  // LookupNow's pass of this very request
    first_pass_.reset();
  } else if (Status failed = Probe(args, args.flush || args.wait_ms > 0, &answers); !failed.ok()) {
    // control-api.md, the `lookup` row: with wait_ms the probe is sent at once.
    co_return failed;
  }
  if (args.wait_ms > 0 && HasRetry(answers) && !waits_cut_) {
    if (Status failed = co_await AwaitAnswers(args, &answers); !failed.ok()) co_return failed;
  }
  AddResults(answers, response);
  co_return Status::Ok();
}

Status EngineSession::LookupNow(const json::object& request, json::object* response, bool* must_wait) {
  first_pass_.reset();  // never another request's
  LookupArgs args;
  if (Status bad = ReadLookup(request, &args); !bad.ok()) return bad;
  std::vector<session::ProbeAnswer> answers;
  if (Status failed = Probe(args, args.flush || args.wait_ms > 0, &answers); !failed.ok()) return failed;
  if (args.wait_ms > 0 && HasRetry(answers) && !waits_cut_) {
    *must_wait = true;  // Lookup goes on from this pass and waits
    first_pass_ = std::move(answers);
    return Status::Ok();
  }
  AddResults(answers, response);
  return Status::Ok();
}

void EngineSession::AddResults(const std::vector<session::ProbeAnswer>& answers, json::object* response) {
  // Built in the response's own memory (the connection's parse memory).
  json::array results(response->storage());
  results.reserve(answers.size());
  for (session::ProbeAnswer answer : answers) results.emplace_back(AnswerName(answer));
  (*response)["results"] = std::move(results);
}

Status EngineSession::Probe(const LookupArgs& args, bool flush, std::vector<session::ProbeAnswer>* answers) {
  PeerService* peers = Peers();
  if (peers == nullptr) return PeerSideMissing();
  if (Status busy = CheckKvFree(args.peer, args.kv_request_id); !busy.ok()) return busy;
  if (Status full = CheckRequestRoom(args.kv_request_id, &args.peer); !full.ok()) return full;

  // Claimed before the call, undone if it fails: a failure the peer side
  // reports later (through its outbox, after this op) finds the claim.
  const bool claimed = Claim(args.peer, args.kv_request_id);
  answers->clear();  // a re-probe replaces the answers of the last pass
  if (Status failed = peers->Lookup(args.peer, args.kv_request_id, args.keys, flush, answers); !failed.ok()) {
    if (claimed) Unclaim(args.peer, args.kv_request_id);
    return failed;
  }
  OpenRequest(args.kv_request_id);
  if (answers->size() != args.keys.size()) {
    return Status::Internal("the peer side answered " + std::to_string(answers->size()) + " of " +
                            std::to_string(args.keys.size()) + " probes");
  }
  return Status::Ok();
}

// Each event re-asks the peer side exactly as the engine's next plain
// lookup would; the wait ends once nothing is retry, on time-out, or when
// the peer's session or the request ended (then that one answer stands:
// miss or retry per the wire spec's section 1, or the shutdown error).
boost::asio::awaitable<Status> EngineSession::AwaitAnswers(const LookupArgs& args,
                                                           std::vector<session::ProbeAnswer>* answers) {
  lookup_wait_.Begin(args.peer, args.kv_request_id,
                     std::chrono::steady_clock::now() + std::chrono::milliseconds(args.wait_ms));
  Status status;
  for (;;) {
    const LookupWait::Wake wake = co_await lookup_wait_.Next();
    if (wake == LookupWait::Wake::kCut || closed_) break;  // the answers so far stand
    status = Probe(args, false, answers);
    if (!status.ok() || wake != LookupWait::Wake::kAnswers || !HasRetry(*answers)) break;
  }
  lookup_wait_.End();
  co_return status;
}

Status EngineSession::Flush(const json::object&, json::object* response) {
  PeerService* peers = Peers();
  if (peers == nullptr) return PeerSideMissing();
  (*response)["sent"] = peers->FlushLookups();
  return Status::Ok();
}

// The fields load and store share, checked in one order for both: field
// types first, then the region, the slots and the job id.
Status EngineSession::ReadJob(const json::object& request, std::string_view op, std::string* peer,
                              JobRequest* job) const {
  RequestReader reader(request);
  std::vector<uint64_t> block_ids;
  reader.Int("job_id", &job->job_id);
  if (peer != nullptr) reader.Peer("peer", peer);
  reader.IdString("kv_request_id", &job->kv_request_id);
  reader.Keys("keys", 1, &job->keys);
  reader.BlockIds("block_ids", 1, &block_ids);
  std::optional<bool> seal;
  if (peer == nullptr) reader.OptionalBool("seal", &seal);  // store only (control-api.md section 2)
  job->seal = seal.value_or(false);
  reader.SameLength("block_ids", block_ids.size(), "keys", job->keys.size());
  if (!reader.ok()) return reader.status();
  if (Peers() == nullptr) return PeerSideMissing();
  if (Status bad = CheckRegion(op); !bad.ok()) return bad;
  if (Status bad = CheckBlockIds(block_ids, &job->slots); !bad.ok()) return bad;
  return jobs_.CheckJobIdFree(job->job_id);
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

Status EngineSession::Load(const json::object& request, json::object*) {
  JobRequest job;
  std::string peer;
  if (Status bad = ReadJob(request, "load", &peer, &job); !bad.ok()) return bad;
  PeerService* peers = Peers();
  const int64_t job_id = job.job_id;
  const std::string& kv_request_id = job.kv_request_id;
  std::vector<protocol::Key>& keys = job.keys;
  std::vector<SlotIndex>& slots = job.slots;
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
  Status failed = peers->Load(node_job, peer, kv_request_id, std::move(keys), std::move(slots), MakeSlotSink(region_));
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

Status EngineSession::Store(const json::object& request, json::object*) {
  JobRequest job;
  if (Status bad = ReadJob(request, "store", nullptr, &job); !bad.ok()) return bad;
  if (job.seal) return Status::Internal("a sealed store must take the hashing path");
  return StartStore(job, nullptr);
}

boost::asio::awaitable<Status> EngineSession::StoreSealed(const json::object& request, json::object*) {
  JobRequest job;
  if (Status bad = ReadJob(request, "store", nullptr, &job); !bad.ok()) co_return bad;
  SlotSeals seals;
  if (job.seal) {
    // The checks that need no hashing come first, so a refused store costs
    // nothing; StartStore makes them again after (cheap, and exact).
    if (Status busy = CheckSupplyFree(job.kv_request_id); !busy.ok()) co_return busy;
    if (Status full = CheckRequestRoom(job.kv_request_id, nullptr); !full.ok()) co_return full;
    if (Status failed = co_await HashSeals("store", job.slots, &seals); !failed.ok()) co_return failed;
    // Nothing of this engine ran meanwhile (its requests are answered in
    // order), but a job id may have been delivered: checked again.
    if (Status taken = jobs_.CheckJobIdFree(job.job_id); !taken.ok()) co_return taken;
  }
  co_return StartStore(job, job.seal ? &seals : nullptr);
}

Status EngineSession::CheckSupplyFree(const std::string& kv_request_id) const {
  std::optional<EngineId> owner = registry_.SupplyOwner(kv_request_id);
  if (!owner || *owner == id_) return Status::Ok();
  return Status::Conflict("kv_request_id '" + kv_request_id +
                          "' has supply from another engine of this node; a request's supply is its engine's");
}

Status EngineSession::StartStore(JobRequest& job, const SlotSeals* seals) {
  PeerService* peers = Peers();
  if (peers == nullptr) return PeerSideMissing();
  const int64_t job_id = job.job_id;
  const std::string& kv_request_id = job.kv_request_id;
  std::vector<protocol::Key>& keys = job.keys;
  const std::vector<SlotIndex>& slots = job.slots;
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
  peers->Store(node_job, kv_request_id, std::move(keys), std::move(pins));
  return Status::Ok();
}

Status EngineSession::Finish(const json::object& request, json::object*) {
  RequestReader reader(request);
  std::string kv_request_id;
  reader.IdString("kv_request_id", &kv_request_id);
  if (!reader.ok()) return reader.status();
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

Status EngineSession::ReadPoll(const json::object& request, std::optional<uint64_t>* wait_ms) {
  RequestReader reader(request);
  reader.OptionalUint("wait_ms", kMaxWaitMs, wait_ms);
  return reader.status();
}

Status EngineSession::PollNow(const json::object& request, json::object* response, bool* must_wait) {
  std::optional<uint64_t> wait_ms;
  if (Status bad = ReadPoll(request, &wait_ms); !bad.ok()) return bad;
  if (wait_ms.value_or(0) > 0 && !jobs_.HasReport() && !waits_cut_) {
    *must_wait = true;
    return Status::Ok();
  }
  jobs_.TakeReport(response);
  return Status::Ok();
}

boost::asio::awaitable<Status> EngineSession::Poll(const json::object& request, json::object* response) {
  std::optional<uint64_t> wait_ms;
  if (Status bad = ReadPoll(request, &wait_ms); !bad.ok()) co_return bad;
  if (wait_ms.value_or(0) > 0 && !jobs_.HasReport() && !waits_cut_) {
    poll_timer_.expires_after(std::chrono::milliseconds(*wait_ms));
    poll_waiting_ = true;
    boost::system::error_code ec;  // operation_aborted = woken early
    co_await poll_timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    poll_waiting_ = false;
  }
  jobs_.TakeReport(response);
  co_return Status::Ok();
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
