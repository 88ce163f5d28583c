// The randomized session test's world (tests/session/randomized_test.cc):
// two nodes, each with a region and an index, whose PeerSessions talk
// through a SessionPipe, and the Simulation that drives them with random
// engine, network and clock operations (random_operations.cc) and checks
// the invariants after each (random_simulation.cc).
#pragma once

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "session/peer_session.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session::testing::random_test {

using State = PeerSession::State;

constexpr uint32_t kKeys = 12;       // key i lives in block i on both nodes
constexpr uint32_t kFirstSlot = 16;  // destination slots: [kFirstSlot, kNumBlocks)
constexpr uint64_t kPoisonSeed = 0xdead;
constexpr int kTrace = 40;

inline protocol::Key KeyOf(uint32_t i) { return "key-" + std::to_string(i); }
inline uint64_t KeySeed(uint32_t i) { return 1000 + i; }

struct Job {
  bool load = true;
  int node = 0;  // the node whose session owns the job
  std::string kv;
  std::vector<uint32_t> keys;
  std::vector<uint32_t> slots;  // loads only
  int generation = 0;
  int results = 0;
};

struct Request {
  std::string kv;
  int consumer = 0;
  bool symmetric = false;
  int generation = 0;
  bool consumer_done = false;
  bool producer_done = false;
  std::set<uint32_t> probed;         // keys registered in the open round
  std::vector<uint32_t> unsupplied;  // PD: demanded keys not yet stored
};

struct SimNode {
  SimNode(std::string node_id, uint64_t epoch) : id(std::move(node_id)), epoch_seed(epoch) {
    region = std::make_shared<MemoryRegion>(kNumBlocks, kBlockLen);
    index = std::make_unique<MemoryIndex>(region);
    for (uint32_t k = 0; k < kKeys; ++k) region->Fill(k, KeySeed(k));
    for (uint32_t s = kFirstSlot; s < kNumBlocks; ++s) {
      region->Fill(s, kPoisonSeed);
      free_slots.insert(s);
    }
  }
  std::string id;
  uint64_t epoch_seed;
  std::shared_ptr<MemoryRegion> region;
  std::unique_ptr<MemoryIndex> index;
  std::unique_ptr<PeerSession> session;
  std::set<uint32_t> free_slots;
};

class Simulation {
 public:
  explicit Simulation(uint64_t seed);
  void Run(int ops);

  std::map<std::string, int> close_reasons;
  int late_frame_closes = 0;
  std::map<std::string, int> failure_reasons;
  int successes_sym = 0, successes_pd = 0, failures = 0, reconnects = 0;

 private:
  // ---- plumbing -------------------------------------------------------------

  uint32_t Uniform(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_); }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  PeerSession& S(int node) { return *nodes_[node].session; }
  bool Closed(int node) { return S(node).state() == State::kClosed; }

  void Trace(const std::string& op);
  [[noreturn]] void Fail(const std::string& what);
  SessionConfig Config(int node);
  void Reconnect();
  void LoseConnection();
  void CheckCloseReason(int node);

  // ---- results --------------------------------------------------------------

  void Collect();
  void OnResult(int node, const JobResult& result, bool load);
  void VerifyLoad(JobId id, const Job& job);

  // ---- engine operations ----------------------------------------------------

  Request* PickRequest(bool want_symmetric, bool consumer_open, bool wants_supply = false);
  std::vector<uint32_t> DistinctKeys(uint32_t max_count);
  std::optional<std::vector<uint32_t>> TakeSlots(int node, size_t n);
  void Publish();
  void NewRequest(bool symmetric);
  void Probe(Request& r);
  void SymmetricLoad(Request& r);
  void PdLoad(Request& r);
  bool Load(Request& r, const std::vector<uint32_t>& keys);
  void Supply(Request& r);
  void FinishConsumer(Request& r);
  void FinishProducer(Request& r);

  // ---- network and clock ----------------------------------------------------

  void PartialPump();
  void Tick();

  void Flowed() { pipe_.Pump(); }

  void RunSeconds(int seconds);
  void Stall(int seconds);

  void OpPublish() { Publish(); }
  void OpNewSymmetric() { NewRequest(true); }
  void OpNewPd() { NewRequest(false); }
  void OpProbe();
  void OpFlush();
  void OpSymmetricLoad();
  void OpPdLoad();
  void OpSupply();
  void OpFinishConsumer();
  void OpFinishProducer();
  void OpPump();
  void OpTick();
  void OpRun() { RunSeconds(3 + static_cast<int>(Uniform(8))); }
  void OpRunOne() { RunSeconds(1); }
  void OpStall() { Stall(1 + static_cast<int>(Uniform(5))); }
  void OpSilence();
  void OpClose();
  void OpRestart();
  void OpUnknown();
  void RandomOp();
  void Drain();

  uint64_t seed_;
  std::mt19937_64 rng_;
  FakeClock clock_;
  SessionPipe pipe_;
  std::vector<SimNode> nodes_;
  std::vector<uint8_t> poison_;
  std::map<std::string, Request> requests_;
  std::map<JobId, Job> jobs_;
  std::set<std::string> bindings_[2];  // per node: ids whose supply the daemon would route to its session
  std::deque<std::string> trace_;
  int generation_ = 0;
  // When each node sent abort_fetch for (kv_request_id, round), this connection.
  std::array<std::map<std::pair<std::string, protocol::RoundSeq>, TimePoint>, 2> aborts_sent_;
  int step_ = 0;
  uint64_t token_base_ = 0;
  uint64_t request_counter_ = 0;
  JobId job_counter_ = 0;
};

}  // namespace kvpeer::session::testing::random_test
