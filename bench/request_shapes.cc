#include "bench/request_shapes.h"

#include <memory>

#include <boost/json/serialize.hpp>

#include "bench/engine_client.h"
#include "bench/scenarios.h"
#include "bench/util.h"

namespace kvpeer::bench {

namespace json = boost::json;

namespace {

constexpr uint32_t kSpace = 7;
// Blocks checked after a full-run load: one in this many, and the last.
constexpr uint64_t kVerifyStride = 64;

// A producer with every key published and a consumer connected to it.
struct ShapePair {
  ShapePair(const DaemonOptions& daemon, const std::string& dir, uint64_t keys)
      : producer(Named(daemon, dir, "shape-a")), consumer(Named(daemon, dir, "shape-b")) {
    producer.Start();
    consumer.Start();
    source = std::make_unique<SourceEngine>(producer.socket_path(), daemon.block_len, keys, kSpace, &VllmStyleKey);
    engine = std::make_unique<ConsumerEngine>(consumer.socket_path(), daemon.block_len, "bench-shape",
                                              std::make_shared<Region>(keys, daemon.block_len));
    // Dialled now, so that the first lookup does not include the dial.
    engine->client.Call(request::Connect(producer.listen()), "connect");
  }
  ~ShapePair() {
    engine.reset();
    source.reset();
    StopTogether(producer, consumer);
  }
  static DaemonOptions Named(const DaemonOptions& daemon, const std::string& dir, const std::string& name) {
    return WithFiles(daemon, dir + "/" + name + "-" + std::to_string(daemon.block_len));
  }

  DaemonProcess producer, consumer;
  std::unique_ptr<SourceEngine> source;
  std::unique_ptr<ConsumerEngine> engine;
};

// Counted in the answer's text: parsing 8192 results would put the bench's
// own JSON work into the measured time.
size_t Occurrences(const std::string& text, const std::string& word) {
  size_t count = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + word.size())) ++count;
  return count;
}

std::vector<uint64_t> CheckedSlots(uint64_t keys, bool all) {
  std::vector<uint64_t> slots;
  for (uint64_t i = 0; i < keys; i += all ? 1 : kVerifyStride) slots.push_back(i);
  if (slots.back() != keys - 1) slots.push_back(keys - 1);
  return slots;
}

// Lookup with wait_ms (one call resolves it) until no key is `retry`; the
// number of lookup calls made.
int LookupAll(EngineClient& client, const std::string& peer, const std::string& kv,
              const std::vector<std::string>& keys, int64_t pace_us) {
  const std::string again = request::Lookup(peer, kv, keys, false, request::kLookupWaitMs);
  client.Send(again);
  std::string answer = client.ReadLine();
  int calls = 1;
  while (answer.find("\"retry\"") != std::string::npos) {
    SleepUs(pace_us);
    client.Send(again);
    answer = client.ReadLine();
    ++calls;
  }
  if (answer.find("\"ok\":true") == std::string::npos || Occurrences(answer, "\"hit\"") != keys.size()) {
    throw BenchError("request shape: a lookup of " + std::to_string(keys.size()) + " published keys on " + peer +
                     " did not hit them all: " + answer.substr(0, 300));
  }
  return calls;
}

// Polls until job `job_id` has its result; throws unless it succeeded.
void AwaitLoad(EngineClient& client, int64_t job_id) {
  for (;;) {
    const json::object report = client.Call(request::Poll(100), "poll");
    for (const json::value& item : report.at("results").as_array()) {
      const json::object& result = item.as_object();
      if (result.at("job_id").to_number<int64_t>() != job_id) continue;
      if (!result.at("success").as_bool()) throw BenchError("request shape: load failed: " + json::serialize(result));
      return;
    }
  }
}

double ElapsedMs(int64_t since_ns) { return static_cast<double>(NowNs() - since_ns) / 1e6; }

double CpuUs(const DaemonProcess& daemon, int64_t since_ns) {
  return static_cast<double>(daemon.CpuNs() - since_ns) / 1e3;
}

ShapeSample MeasureOnce(ShapePair& pair, const std::vector<std::string>& keys, const std::vector<uint32_t>& slots,
                        const ShapeConfig& config, int repetition) {
  EngineClient& client = pair.engine->client;
  Region& dest = *pair.engine->region;
  const std::string peer = pair.producer.listen();
  const std::string kv = "shape-" + std::to_string(dest.block_len()) + "-" + std::to_string(repetition);
  const std::vector<uint64_t> checked = CheckedSlots(keys.size(), config.verify_all);
  for (uint64_t slot : checked) dest.Scribble(slot);
  ShapeSample sample;

  int64_t producer0 = pair.producer.CpuNs(), consumer0 = pair.consumer.CpuNs();
  int64_t start = NowNs();
  sample.lookup_calls = LookupAll(client, peer, kv, keys, config.retry_pace_us);
  sample.lookup_ms = ElapsedMs(start);
  sample.lookup_producer_cpu_us = CpuUs(pair.producer, producer0);
  sample.lookup_consumer_cpu_us = CpuUs(pair.consumer, consumer0);

  producer0 = pair.producer.CpuNs();
  consumer0 = pair.consumer.CpuNs();
  start = NowNs();
  client.Call(request::Load(repetition, peer, kv, keys, slots), "load");
  AwaitLoad(client, repetition);
  sample.load_ms = ElapsedMs(start);
  sample.load_producer_cpu_us = CpuUs(pair.producer, producer0);
  sample.load_consumer_cpu_us = CpuUs(pair.consumer, consumer0);

  for (uint64_t slot : checked) {
    if (!dest.Verify(slot, SourceId(kSpace, static_cast<uint32_t>(slot)))) {
      throw BenchError("request shape: slot " + std::to_string(slot) + " of " + kv + " does not hold its block");
    }
    ++sample.verified_blocks;
  }
  client.Call(request::Finish(kv), "finish");
  return sample;
}

}  // namespace

std::vector<ShapeSample> MeasureRequestShape(const DaemonOptions& daemon, const std::string& dir,
                                             const ShapeConfig& config) {
  ShapePair pair(daemon, dir, config.keys);
  std::vector<std::string> keys;
  std::vector<uint32_t> slots;
  for (uint64_t i = 0; i < config.keys; ++i) {
    keys.push_back(VllmStyleKey(kSpace, static_cast<uint32_t>(i)));
    slots.push_back(static_cast<uint32_t>(i));
  }
  // An untimed first pass: the daemons' first touches of the regions'
  // pages are not in the figures.
  MeasureOnce(pair, keys, slots, config, 0);
  std::vector<ShapeSample> samples;
  for (int repetition = 1; repetition <= config.repeats; ++repetition) {
    samples.push_back(MeasureOnce(pair, keys, slots, config, repetition));
  }
  return samples;
}

}  // namespace kvpeer::bench
