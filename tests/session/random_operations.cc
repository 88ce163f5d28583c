// The randomized test's operations: what the engines, the network and the
// clock do, one picked at random per step (Simulation::RandomOp).
#include <algorithm>
#include <chrono>
#include <iterator>

#include "tests/session/random_simulation.h"

namespace kvpeer::session::testing::random_test {

using namespace std::chrono_literals;

Request* Simulation::PickRequest(bool want_symmetric, bool consumer_open, bool wants_supply) {
  std::vector<Request*> open;
  for (auto& [kv, r] : requests_)
    if (r.generation == generation_ && r.symmetric == want_symmetric && (!consumer_open || !r.consumer_done) &&
        (!wants_supply || (!r.unsupplied.empty() && !r.producer_done)))
      open.push_back(&r);
  return open.empty() ? nullptr : open[Uniform(static_cast<uint32_t>(open.size()))];
}

std::vector<uint32_t> Simulation::DistinctKeys(uint32_t max_count) {
  std::set<uint32_t> keys;
  const uint32_t n = 1 + Uniform(max_count);
  while (keys.size() < n) keys.insert(Uniform(kKeys));
  return {keys.begin(), keys.end()};
}

std::optional<std::vector<uint32_t>> Simulation::TakeSlots(int node, size_t n) {
  auto& free = nodes_[node].free_slots;
  if (free.size() < n) return std::nullopt;
  std::vector<uint32_t> slots;
  for (size_t i = 0; i < n; ++i) {
    auto it = std::next(free.begin(), Uniform(static_cast<uint32_t>(free.size())));
    auto got = nodes_[node].region->Block(*it);
    if (!std::equal(got.begin(), got.end(), poison_.begin()))
      Fail("slot " + std::to_string(*it) + " was written after its load's result");
    slots.push_back(*it);
    free.erase(it);
  }
  return slots;
}

void Simulation::Publish() {
  const int n = static_cast<int>(Uniform(2));
  const uint32_t k = Uniform(kKeys);
  if (Chance(0.6)) {
    nodes_[n].index->Publish(KeyOf(k), k);
    Trace("publish n" + std::to_string(n) + " k" + std::to_string(k));
  } else {
    nodes_[n].index->Unpublish(KeyOf(k));
    Trace("unpublish n" + std::to_string(n) + " k" + std::to_string(k));
  }
}

void Simulation::NewRequest(bool symmetric) {
  Request r;
  r.consumer = static_cast<int>(Uniform(2));
  r.symmetric = symmetric;
  r.generation = generation_;
  r.kv = (symmetric ? "s" : "p") + std::to_string(++request_counter_) + "-n" + std::to_string(r.consumer);
  Trace("new request " + r.kv);
  requests_[r.kv] = r;
  if (symmetric)
    Probe(requests_[r.kv]);
  else
    requests_[r.kv].unsupplied.clear();
}

void Simulation::Probe(Request& r) {
  for (uint32_t k : DistinctKeys(4)) {
    r.probed.insert(k);
    S(r.consumer).RegisterLookup(r.kv, KeyOf(k));
  }
  if (Chance(0.5)) S(r.consumer).FlushPendingLookups();
  Trace("probe " + r.kv);
}

void Simulation::SymmetricLoad(Request& r) {
  std::vector<uint32_t> hits;
  for (uint32_t k : r.probed)
    if (S(r.consumer).RegisterLookup(r.kv, KeyOf(k)) == ProbeAnswer::kHit) hits.push_back(k);
  if (hits.empty()) return;
  std::shuffle(hits.begin(), hits.end(), rng_);
  hits.resize(1 + Uniform(static_cast<uint32_t>(std::min<size_t>(hits.size(), 4))));
  Load(r, hits);
  r.probed.clear();  // the fetch closes the round
}

void Simulation::PdLoad(Request& r) {
  const std::vector<uint32_t> keys = DistinctKeys(4);
  if (Load(r, keys)) r.unsupplied.insert(r.unsupplied.end(), keys.begin(), keys.end());
}

bool Simulation::Load(Request& r, const std::vector<uint32_t>& keys) {
  auto slots = TakeSlots(r.consumer, keys.size());
  if (!slots) return false;
  const JobId id = ++job_counter_;
  std::vector<protocol::Key> wire_keys;
  for (uint32_t k : keys) wire_keys.push_back(KeyOf(k));
  const Status s =
      S(r.consumer)
          .RequestBlocks(id, r.kv, wire_keys, {slots->begin(), slots->end()}, nodes_[r.consumer].region->Sink());
  Trace("load job " + std::to_string(id) + " " + r.kv + " keys " + std::to_string(keys.size()) + " -> " +
        (s.ok() ? "ok" : s.message()));
  if (!s.ok()) {
    if (!Closed(r.consumer)) Fail("RequestBlocks refused a valid load: " + s.message());
    for (uint32_t slot : *slots) nodes_[r.consumer].free_slots.insert(slot);
    return false;
  }
  jobs_[id] = Job{true, r.consumer, r.kv, keys, *slots, generation_, 0};
  return true;
}

// The producer's engine stores (some of) the demanded blocks; sometimes a
// key is never stored, so its load can only end by timeout or finish.
void Simulation::Supply(Request& r) {
  if (r.unsupplied.empty() || r.producer_done) return;
  std::shuffle(r.unsupplied.begin(), r.unsupplied.end(), rng_);
  const size_t n = 1 + Uniform(static_cast<uint32_t>(r.unsupplied.size()));
  std::vector<uint32_t> keys(r.unsupplied.begin(), r.unsupplied.begin() + static_cast<long>(n));
  r.unsupplied.erase(r.unsupplied.begin(), r.unsupplied.begin() + static_cast<long>(n));
  if (Chance(0.05)) keys.pop_back();
  if (keys.empty()) return;
  const int producer = 1 - r.consumer;
  const JobId id = ++job_counter_;
  std::vector<protocol::Key> wire_keys;
  std::vector<PinRef> pins;
  for (uint32_t k : keys) {
    wire_keys.push_back(KeyOf(k));
    pins.push_back(nodes_[producer].region->Pin(k));
  }
  jobs_[id] = Job{false, producer, r.kv, keys, {}, generation_, 0};
  S(producer).AddSupply(id, r.kv, std::move(wire_keys), std::move(pins));
  Trace("supply job " + std::to_string(id) + " " + r.kv + " keys " + std::to_string(keys.size()));
}

void Simulation::FinishConsumer(Request& r) {
  S(r.consumer).Finish(r.kv);
  r.consumer_done = true;
  r.probed.clear();
  Trace("finish consumer " + r.kv);
}

void Simulation::FinishProducer(Request& r) {
  S(1 - r.consumer).Finish(r.kv);
  r.producer_done = true;
  Trace("finish producer " + r.kv);
}

void Simulation::PartialPump() {
  const uint32_t steps = 1 + Uniform(8);
  for (uint32_t i = 0; i < steps; ++i) pipe_.Step(Uniform(2) == 0 ? SessionPipe::kA : SessionPipe::kB);
  Trace("partial pump " + std::to_string(steps));
}

void Simulation::Tick() {
  S(0).OnTick();
  S(1).OnTick();
}

// Seconds pass with the network flowing: load, abort-ack and store
// timeouts fire, pings keep the connection alive.
void Simulation::RunSeconds(int seconds) {
  Trace("run " + std::to_string(seconds) + " s");
  for (int i = 0; i < seconds && !Closed(0) && !Closed(1); ++i) {
    clock_.Advance(1s);
    Tick();
    Flowed();
    Collect();
  }
}

// Seconds pass with one direction stalled: acks and answers are late.
void Simulation::Stall(int seconds) {
  const SessionPipe::Side open = Uniform(2) == 0 ? SessionPipe::kA : SessionPipe::kB;
  Trace("stall " + std::to_string(seconds) + " s, only side " + std::to_string(open) + " flows");
  for (int i = 0; i < seconds && !Closed(0) && !Closed(1); ++i) {
    clock_.Advance(1s);
    Tick();
    while (pipe_.Step(open)) {
    }
    Collect();
  }
}

void Simulation::OpProbe() {
  if (Request* r = PickRequest(true, true)) Probe(*r);
}

void Simulation::OpFlush() {
  const int n = static_cast<int>(Uniform(2));
  Trace("flush n" + std::to_string(n));
  S(n).FlushPendingLookups();
}

void Simulation::OpSymmetricLoad() {
  if (Request* r = PickRequest(true, true)) SymmetricLoad(*r);
}

void Simulation::OpPdLoad() {
  if (Request* r = PickRequest(false, true)) PdLoad(*r);
}

void Simulation::OpSupply() {
  if (Request* r = PickRequest(false, false, true)) Supply(*r);
}

void Simulation::OpFinishConsumer() {
  if (Request* r = PickRequest(Chance(0.5), true)) FinishConsumer(*r);
}

void Simulation::OpFinishProducer() {
  if (Request* r = PickRequest(false, false); r && !r->producer_done) FinishProducer(*r);
}

void Simulation::OpPump() {
  Trace("pump");
  Flowed();
}

void Simulation::OpTick() {
  clock_.Advance(std::chrono::milliseconds(Uniform(1500)));
  Trace("tick");
  Tick();
}

void Simulation::OpSilence() {
  Trace("silence");
  clock_.Advance(10s);
  Tick();
}

void Simulation::OpClose() {
  const int n = static_cast<int>(Uniform(2));
  const bool notify = Chance(0.5);
  Trace("close n" + std::to_string(n) + (notify ? " with disconnect" : " silently"));
  S(n).Close(CloseCause::kOperator, "operator request", notify);
}

void Simulation::OpRestart() {
  const int n = static_cast<int>(Uniform(2));
  Trace("peer restart n" + std::to_string(n));
  S(0).Close(CloseCause::kPeerRestarted, "restart", false);
  S(1).Close(CloseCause::kPeerRestarted, "restart", false);
  nodes_[n].epoch_seed += 10;  // a new daemon incarnation
}

void Simulation::OpUnknown() {
  const int n = static_cast<int>(Uniform(2));
  Trace("unknown type to n" + std::to_string(n));
  // Ignored after ready; before it a violation (wire spec 1.1 section 2),
  // so only a ready session gets one here.
  if (!Closed(n) && S(n).ready() && !S(n).OnMessage(protocol::Unknown{"future_type"}).ok()) Fail("unknown type closed");
}

void Simulation::RandomOp() {
  using Op = void (Simulation::*)();
  // Weights per mille. Connection-ending operations are rare so that
  // requests live long enough to finish their loads.
  static const std::vector<std::pair<int, Op>> kOps = {
      {60, &Simulation::OpPublish},        {50, &Simulation::OpNewSymmetric},  {50, &Simulation::OpProbe},
      {50, &Simulation::OpFlush},          {90, &Simulation::OpSymmetricLoad}, {40, &Simulation::OpNewPd},
      {60, &Simulation::OpPdLoad},         {80, &Simulation::OpSupply},        {40, &Simulation::OpFinishConsumer},
      {20, &Simulation::OpFinishProducer}, {110, &Simulation::OpPump},         {150, &Simulation::PartialPump},
      {100, &Simulation::OpTick},          {30, &Simulation::OpRun},           {24, &Simulation::OpRunOne},
      {25, &Simulation::OpStall},          {3, &Simulation::OpSilence},        {4, &Simulation::OpClose},
      {4, &Simulation::OpRestart},         {10, &Simulation::OpUnknown},
  };
  int roll = static_cast<int>(Uniform(1000));
  for (const auto& [weight, op] : kOps) {
    if (roll < weight) return (this->*op)();
    roll -= weight;
  }
}

}  // namespace kvpeer::session::testing::random_test
