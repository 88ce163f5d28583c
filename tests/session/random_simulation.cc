// The randomized test's Simulation: connections made and lost, results
// collected, and the invariants checked after every operation and at the end.
#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "tests/session/random_simulation.h"

namespace kvpeer::session::testing::random_test {

using namespace std::chrono_literals;

Simulation::Simulation(uint64_t seed) : seed_(seed), rng_(seed), pipe_(kBlockLen) {
  pipe_.set_record(false);
  nodes_.emplace_back("node-a:7000", 1);
  nodes_.emplace_back("node-b:7000", 2);
  auto poison = std::make_shared<MemoryRegion>(1, kBlockLen);
  poison->Fill(0, kPoisonSeed);
  poison_.assign(poison->Block(0).begin(), poison->Block(0).end());
  Reconnect();
}

void Simulation::Run(int ops) {
  for (step_ = 0; step_ < ops; ++step_) {
    RandomOp();
    Collect();
    if (Closed(0) || Closed(1)) LoseConnection();
  }
  Drain();
}

void Simulation::Trace(const std::string& op) {
  trace_.push_back("#" + std::to_string(step_) + " " + op);
  if (trace_.size() > kTrace) trace_.pop_front();
}

void Simulation::Fail(const std::string& what) {
  std::ostringstream out;
  out << "seed " << seed_ << " step " << step_ << ": " << what << "\nlast operations:\n";
  for (const auto& t : trace_) out << "  " << t << "\n";
  FAIL(out.str());
  throw std::logic_error("unreachable");
}

SessionConfig Simulation::Config(int node) {
  SessionConfig c = MakeConfig(nodes_[node].id, nodes_[node].epoch_seed);
  c.random_token = TokenSource(seed_ * 100000 + ++token_base_ * 1000);
  c.handshake_timeout = 4s;
  c.client.load_timeout = 12s;
  c.client.abort_ack_timeout = 3s;
  c.server.store_timeout = 15s;
  c.server.max_frame_payload = 2 * kBlockLen;
  return c;
}

// Fresh sessions on a fresh connection; either node may dial.
void Simulation::Reconnect() {
  ++generation_;
  for (auto& sent : aborts_sent_) sent.clear();
  pipe_.Reset();
  const int dialler = static_cast<int>(Uniform(2));
  for (int n = 0; n < 2; ++n) {
    const std::string expected = n == dialler ? nodes_[1 - n].id : "";
    SendFn to_pipe = pipe_.SendFrom(n == 0 ? SessionPipe::kA : SessionPipe::kB);
    SendFn send = [this, n, to_pipe](OutFrame frame) {
      if (const auto* abort = std::get_if<protocol::AbortFetch>(&frame.message))
        aborts_sent_[n].emplace(std::make_pair(abort->kv_request_id, abort->round_seq), clock_.now());
      to_pipe(std::move(frame));
    };
    nodes_[n].session =
        std::make_unique<PeerSession>(Config(n), clock_.AsClock(), std::move(send), *nodes_[n].index, expected);
    pipe_.Attach(n == 0 ? SessionPipe::kA : SessionPipe::kB, nodes_[n].session.get());
  }
  S(0).Start();
  S(1).Start();
}

// One side closed: the other learns it from the stream, then both are
// gone; everything of that connection must have ended and been unpinned.
void Simulation::LoseConnection() {
  pipe_.Pump();
  if (!Closed(0) || !Closed(1)) Fail("one side still open after the other closed");
  Trace("connection lost: " + S(0).close_reason() + " / " + S(1).close_reason());
  for (int n = 0; n < 2; ++n) CheckCloseReason(n);
  ++close_reasons[S(0).close_reason().substr(0, 40)];
  Collect();
  for (const auto& [id, job] : jobs_)
    if (job.generation == generation_ && job.results != 1)
      Fail("job " + std::to_string(id) + " has " + std::to_string(job.results) + " results after close");
  pipe_.Reset();  // frames in flight die with the socket
  for (int n = 0; n < 2; ++n) {
    nodes_[n].session.reset();
    if (nodes_[n].region->total_live_pins() != 0) Fail("pins left after close on node " + std::to_string(n));
  }
  ++reconnects;
  Reconnect();
}

// Two correct peers never accuse each other of a violation: a session
// ends only by a timer, a local close or the other side ending. One
// exception is inherent: block_data held back longer than the abort-ack
// timeout arrives for a round the consumer has retired by that timeout,
// and a write outside any load is a violation (spec section 5).
void Simulation::CheckCloseReason(int node) {
  std::string reason = S(node).close_reason();
  const std::string kPeer = "peer disconnected: ";
  int accuser = node;
  if (reason.rfind(kPeer, 0) == 0) {
    reason = reason.substr(kPeer.size());
    accuser = 1 - node;
  }
  static const std::set<std::string> expected = {"handshake timed out", "operator request", "restart",
                                                 "peer silent for 10 s", "connection lost"};
  if (expected.count(reason)) return;
  static const std::regex late_frame(
      "block_data for kv_request_id (\\S+) round (\\d+): no load of this round is in flight");
  std::smatch m;
  if (std::regex_match(reason, m, late_frame)) {
    const auto it = aborts_sent_[accuser].find({m[1].str(), std::stoull(m[2].str())});
    if (it != aborts_sent_[accuser].end() && clock_.now() - it->second >= 3s) {
      ++late_frame_closes;
      return;
    }
  }
  Fail("unexpected close: " + reason);
}

void Simulation::Collect() {
  for (int n = 0; n < 2; ++n) {
    SessionResults r = S(n).TakeResults();
    for (const JobResult& l : r.loads) OnResult(n, l, true);
    for (const JobResult& s : r.stores) OnResult(n, s, false);
    for (const auto& kv : r.failed_request_ids)
      if (!requests_.count(kv)) Fail("unknown failed request id " + kv);
    for (const auto& kv : r.new_fetch_ids)
      if (!requests_.count(kv)) Fail("unknown new fetch id " + kv);
    // The daemon's supply bindings (PeerManager::UnbindEndedSupply): one
    // for every fetched id, dropped once the session no longer serves it.
    for (const auto& kv : r.new_fetch_ids) bindings_[n].insert(kv);
    for (const auto& kv : r.ended_fetch_ids) {
      if (!requests_.count(kv)) Fail("unknown ended fetch id " + kv);
      if (!S(n).ServesRequest(kv)) bindings_[n].erase(kv);
    }
    if (Closed(n)) bindings_[n].clear();  // the daemon drops a closed session's bindings
    for (const auto& kv : bindings_[n])
      if (!S(n).ServesRequest(kv)) Fail("binding of " + kv + " outlived its serving: no ended id reported");
  }
}

void Simulation::OnResult(int node, const JobResult& result, bool load) {
  auto it = jobs_.find(result.job_id);
  if (it == jobs_.end()) Fail("result for unknown job " + std::to_string(result.job_id));
  Job& job = it->second;
  if (job.load != load || job.node != node || job.kv != result.kv_request_id)
    Fail("result of job " + std::to_string(result.job_id) + " reported wrongly");
  if (++job.results > 1) Fail("job " + std::to_string(result.job_id) + " has two results");
  if (!result.success && result.reason.empty()) Fail("failure without a reason");
  if (!load) return;
  if (result.success) VerifyLoad(result.job_id, job);
  if (!result.success) {
    ++failures;
    ++failure_reasons[(job.kv[0] == 's' ? "sym: " : "pd: ") + result.reason.substr(0, 50)];
  }
  for (uint32_t slot : job.slots) {
    nodes_[node].region->Fill(slot, kPoisonSeed);
    nodes_[node].free_slots.insert(slot);
  }
}

void Simulation::VerifyLoad(JobId id, const Job& job) {
  const auto& requests_kv = requests_.at(job.kv);
  (requests_kv.symmetric ? successes_sym : successes_pd)++;
  const MemoryRegion& producer = *nodes_[1 - job.node].region;
  for (size_t i = 0; i < job.keys.size(); ++i) {
    auto got = nodes_[job.node].region->Block(job.slots[i]);
    auto want = const_cast<MemoryRegion&>(producer).Block(job.keys[i]);
    if (!std::equal(got.begin(), got.end(), want.begin()))
      Fail("load " + std::to_string(id) + " slot " + std::to_string(job.slots[i]) + " has wrong bytes");
  }
}

// Every request ends, every timer runs out; then the connection closes.
void Simulation::Drain() {
  step_ = -1;
  Trace("drain");
  for (auto& [kv, r] : requests_) {
    if (r.generation != generation_) continue;
    if (!r.consumer_done) FinishConsumer(r);
    if (!r.symmetric && !r.producer_done) FinishProducer(r);
  }
  pipe_.Pump();
  Collect();
  RunSeconds(20);
  if (Closed(0) || Closed(1)) Fail("connection died while draining");
  for (int n = 0; n < 2; ++n)
    if (!bindings_[n].empty())
      Fail("supply binding of " + *bindings_[n].begin() + " left after every request finished");
  for (const auto& [id, job] : jobs_)
    if (job.results != 1) Fail("job " + std::to_string(id) + " without its result after drain");
  for (int n = 0; n < 2; ++n) {
    if (nodes_[n].region->total_live_pins() != 0) Fail("pins left after every request finished");
    if (S(n).LoadsInFlight() != 0 || S(n).RoundsServing() != 0) Fail("work left after every request finished");
  }
  S(0).Close(CloseCause::kShutdown, "shutdown");
  S(1).Close(CloseCause::kShutdown, "shutdown");
  pipe_.Pump();
  Collect();
  for (const auto& [id, job] : jobs_)
    if (job.results != 1) Fail("job " + std::to_string(id) + " has " + std::to_string(job.results) + " results");
  pipe_.Reset();
  for (int n = 0; n < 2; ++n) {
    if (nodes_[n].region->total_live_pins() != 0) Fail("pins left after close");
    if (nodes_[n].free_slots.size() != kNumBlocks - kFirstSlot) Fail("a slot was never released");
    // Taking every slot checks that none was written after its result.
    TakeSlots(n, nodes_[n].free_slots.size());
  }
}

}  // namespace kvpeer::session::testing::random_test
