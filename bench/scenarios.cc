#include "bench/scenarios.h"

#include <boost/json/serialize.hpp>

#include "bench/util.h"

namespace kvpeer::bench {

namespace json = boost::json;

namespace {

constexpr const char* kFingerprint = "kvpeer-bench";
constexpr const char* kSeed = "bench-seed";
constexpr size_t kPipelineWindow = 64;
constexpr size_t kMaxKeysPerPublish = 65536;

}  // namespace

SourceEngine::SourceEngine(const std::string& socket, uint64_t block_len, uint64_t num_blocks, uint32_t space,
                           KeyNaming key_naming)
    : client_(socket), region_(num_blocks, block_len), space_(space), key_naming_(key_naming) {
  client_.Call(request::Hello("bench-source", block_len, kFingerprint, kSeed), "hello");
  client_.Call(request::RegisterFd(num_blocks), "register_region", region_.fd());
  for (uint64_t i = 0; i < num_blocks; ++i) region_.Fill(i, SourceId(space, static_cast<uint32_t>(i)));
  // Sealed, as the vLLM tier publishes (docs/vllm.md): the producer sends
  // the kept checksum instead of hashing each block as it serves it. The
  // bulk part also measures unsealed rounds (docs/performance.md).
  PublishAll(true);
}

void SourceEngine::PublishAll(bool seal) {
  const uint64_t num_blocks = region_.num_blocks();
  for (uint64_t begin = 0; begin < num_blocks; begin += kMaxKeysPerPublish) {
    std::vector<std::string> keys;
    std::vector<uint32_t> ids;
    for (uint64_t i = begin; i < std::min(num_blocks, begin + kMaxKeysPerPublish); ++i) {
      keys.push_back(key_naming_(space_, static_cast<uint32_t>(i)));
      ids.push_back(static_cast<uint32_t>(i));
    }
    client_.Call(request::Publish(keys, ids, seal), "publish");
  }
}

int64_t SourceEngine::RepublishNs(bool seal) {
  const int64_t start = NowNs();
  PublishAll(seal);
  return NowNs() - start;
}

ConsumerEngine::ConsumerEngine(const std::string& socket, uint64_t block_len, const std::string& name,
                               std::shared_ptr<Region> shared_region)
    : client(socket), region(std::move(shared_region)) {
  client.Call(request::Hello(name, block_len, kFingerprint, kSeed), "hello");
  if (region) client.Call(request::RegisterFd(region->num_blocks()), "register_region", region->fd());
}

std::vector<json::object> Pipeline(EngineClient& client, const std::vector<std::string>& lines,
                                   const std::string& what) {
  std::vector<json::object> answers;
  answers.reserve(lines.size());
  size_t sent = 0;
  while (answers.size() < lines.size()) {
    while (sent < lines.size() && sent - answers.size() < kPipelineWindow) client.Send(lines[sent++]);
    answers.push_back(client.ReadOk(what));
  }
  return answers;
}

// ---------------------------------------------------------------------------
// Bulk

namespace {

struct BulkSlot {
  enum class State { kFree, kLookup, kLoad } state = State::kFree;
  uint64_t k = 0;  // the load's sequence number, also its job id
  std::string kv;
  std::vector<std::string> keys;
  std::vector<uint32_t> sources;
  std::vector<uint32_t> dests;
  std::string relookup;
};

// Destination positions of a load checked after it: both ends and two
// positions that move with k (every block with verify_all).
std::vector<size_t> Samples(uint64_t k, size_t count, bool all) {
  std::vector<size_t> out;
  if (all) {
    for (size_t i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  out = {0, count - 1, static_cast<size_t>((k * 7919) % count), static_cast<size_t>((k * 104729 + 13) % count)};
  return out;
}

}  // namespace

BulkResult RunBulk(ConsumerEngine& engine, const std::string& peer, uint32_t space, uint64_t source_blocks,
                   const BulkConfig& config, const std::string& tag) {
  EngineClient& client = engine.client;
  Region& dest = *engine.region;
  const uint64_t per_load = config.blocks_per_load;
  if (per_load == 0 || per_load > source_blocks || per_load * config.depth > dest.num_blocks()) {
    throw BenchError("bulk: " + std::to_string(per_load) + " blocks per load and depth " +
                     std::to_string(config.depth) + " do not fit the regions");
  }
  const uint64_t load_bytes = per_load * dest.block_len();
  const RoundLength length{config.total_bytes, config.min_seconds};
  std::vector<BulkSlot> slots(static_cast<size_t>(config.depth));
  uint64_t next = 0, done = 0;
  BulkResult result;

  auto start_load = [&](size_t g, BulkSlot& slot) {
    for (size_t i : Samples(slot.k, slot.dests.size(), config.verify_all)) dest.Scribble(slot.dests[i]);
    client.Call(request::Load(static_cast<int64_t>(slot.k), peer, slot.kv, slot.keys, slot.dests), "bulk load");
    slot.state = BulkSlot::State::kLoad;
    (void)g;
  };
  auto on_lookup = [&](size_t g, BulkSlot& slot, const json::object& answer) {
    LookupCounts counts = CountLookup(answer);
    if (counts.miss > 0) throw BenchError("bulk: a published key missed on " + peer);
    if (counts.retry == 0) start_load(g, slot);
  };

  const int64_t start = NowNs();
  // A new load starts while the round is short of its length; the round
  // ends when the loads already started are done.
  auto more_loads = [&] { return !length.Reached(next * load_bytes, NowNs() - start); };
  while (more_loads() || done < next) {
    for (size_t g = 0; g < slots.size(); ++g) {
      BulkSlot& slot = slots[g];
      if (slot.state != BulkSlot::State::kFree || !more_loads()) continue;
      slot.k = next++;
      slot.kv = tag + "-" + std::to_string(slot.k);
      slot.keys.clear();
      slot.sources.clear();
      slot.dests.clear();
      const uint64_t first = (slot.k * per_load + slot.k * 17) % source_blocks;
      for (uint64_t i = 0; i < per_load; ++i) {
        const auto source = static_cast<uint32_t>((first + i) % source_blocks);
        slot.sources.push_back(source);
        slot.keys.push_back(BlockKey(space, source));
        slot.dests.push_back(static_cast<uint32_t>(g * per_load + i));
      }
      slot.relookup = request::Lookup(peer, slot.kv, slot.keys, false);
      slot.state = BulkSlot::State::kLookup;
      on_lookup(g, slot, client.Call(request::Lookup(peer, slot.kv, slot.keys, true), "bulk lookup"));
    }
    bool looking = false;
    for (size_t g = 0; g < slots.size(); ++g) {
      if (slots[g].state != BulkSlot::State::kLookup) continue;
      on_lookup(g, slots[g], client.Call(slots[g].relookup, "bulk lookup"));
      looking = looking || slots[g].state == BulkSlot::State::kLookup;
    }
    json::object report = client.Call(request::Poll(looking ? 1 : 100), "poll");
    for (const json::value& item : report.at("results").as_array()) {
      const json::object& r = item.as_object();
      const uint64_t job = static_cast<uint64_t>(r.at("job_id").to_number<int64_t>());
      BulkSlot* slot = nullptr;
      for (auto& candidate : slots) {
        if (candidate.state == BulkSlot::State::kLoad && candidate.k == job) slot = &candidate;
      }
      if (slot == nullptr) throw BenchError("bulk: result for unknown job " + json::serialize(r));
      if (!r.at("success").as_bool()) throw BenchError("bulk: load failed: " + json::serialize(r));
      for (size_t i : Samples(slot->k, slot->dests.size(), config.verify_all)) {
        if (!dest.Verify(slot->dests[i], SourceId(space, slot->sources[i]))) {
          throw BenchError("bulk: block " + std::to_string(slot->dests[i]) + " of load " + slot->kv +
                           " does not hold source block " + std::to_string(slot->sources[i]));
        }
        ++result.verified_blocks;
      }
      result.seconds = static_cast<double>(NowNs() - start) / 1e9;
      client.Call(request::Finish(slot->kv), "finish");
      slot->state = BulkSlot::State::kFree;
      ++done;
    }
  }
  result.loads = next;
  result.bytes = next * load_bytes;
  return result;
}

// ---------------------------------------------------------------------------
// Round trips

std::vector<double> MeasureLookups(EngineClient& client, const std::string& peer, const std::string& key, int count,
                                   int64_t pace_us, const std::string& tag, const std::atomic<bool>* keep_going,
                                   std::atomic<int>* taken, LookupFlow flow) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(count));
  const std::vector<std::string> keys = {key};
  for (int i = 0; i < count; ++i) {
    if (keep_going != nullptr && !keep_going->load()) break;
    const std::string kv = tag + "-" + std::to_string(i);
    const bool one_call = flow == LookupFlow::kOneCall;
    const std::string first = request::Lookup(peer, kv, keys, !one_call, one_call ? request::kLookupWaitMs : 0);
    const std::string again = one_call ? first : request::Lookup(peer, kv, keys, false);
    // The answer of a one-key lookup is recognised by its text, so the
    // engine side adds no JSON parsing to the measured time.
    const int64_t t0 = NowNs();
    client.Send(first);
    std::string answer = client.ReadLine();
    while (answer.find("\"retry\"") != std::string::npos) {
      client.Send(again);
      answer = client.ReadLine();
    }
    const int64_t t1 = NowNs();
    if (answer.find("\"ok\":true") == std::string::npos || answer.find("\"hit\"") == std::string::npos) {
      throw BenchError("lookup of a published key on " + peer + " did not hit: " + answer);
    }
    samples.push_back(static_cast<double>(t1 - t0) / 1e3);
    if (taken != nullptr) ++*taken;
    client.Call(request::Finish(kv), "finish");
    if (pace_us > 0) SleepUs(pace_us);
  }
  return samples;
}

std::vector<double> MeasureControlOps(EngineClient& client, int count, int warmup) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(count));
  const std::string poll = request::Poll(0);
  for (int i = 0; i < count + warmup; ++i) {
    const int64_t t0 = NowNs();
    client.Send(poll);
    const std::string line = client.ReadLine();
    const int64_t t1 = NowNs();
    if (line.find("\"ok\":true") == std::string::npos) throw BenchError("poll failed: " + line);
    if (i >= warmup) samples.push_back(static_cast<double>(t1 - t0) / 1e3);
  }
  return samples;
}

}  // namespace kvpeer::bench
