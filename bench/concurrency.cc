#include "bench/concurrency.h"

#include <map>

#include <boost/json/serialize.hpp>

#include "bench/util.h"

namespace kvpeer::bench {

namespace json = boost::json;

namespace {

// Never published: disaggregated-prefill loads of these keys wait for
// supply that does not come.
constexpr uint32_t kBackgroundSpace = 0x7fff;

void CheckResult(const json::object& result) {
  if (!result.at("success").as_bool()) throw BenchError("load failed: " + json::serialize(result));
}

}  // namespace

Cluster::Cluster(const DaemonOptions& daemon, const std::string& dir, int producers, uint64_t source_blocks)
    : block_len_(daemon.block_len), source_blocks_(source_blocks) {
  DaemonOptions options = daemon;
  const uint64_t block_len = daemon.block_len;
  options.socket_path = dir + "/c.sock";
  options.log_path = dir + "/consumer.log";
  consumer_ = std::make_unique<DaemonProcess>(options);
  consumer_->Start();
  for (int p = 0; p < producers; ++p) {
    options.socket_path = dir + "/p" + std::to_string(p) + ".sock";
    options.log_path = dir + "/producer" + std::to_string(p) + ".log";
    producers_.push_back(std::make_unique<DaemonProcess>(options));
    producers_.back()->Start();
    sources_.push_back(std::make_unique<SourceEngine>(producers_.back()->socket_path(), block_len, source_blocks,
                                                      static_cast<uint32_t>(p + 1)));
  }
}

Cluster::~Cluster() {
  sources_.clear();
  // All signalled first: each daemon drains for 0.5 s, and these drains overlap.
  for (auto& producer : producers_) producer->SignalStop();
  consumer_->SignalStop();
  for (auto& producer : producers_) producer->Stop();
  consumer_->Stop();
}

void Cluster::ConnectAll() {
  EngineClient client(consumer_->socket_path());
  for (auto& producer : producers_) client.Call(request::Connect(producer->listen()), "connect");
}

int64_t Cluster::RoundsServing(int count) {
  int64_t total = 0;
  for (int p = 0; p < count; ++p) {
    EngineClient client(producers_[static_cast<size_t>(p)]->socket_path());
    json::object status = client.Call(request::Status(), "status");
    for (const json::value& peer : status.at("peers").as_array()) {
      total += peer.as_object().at("rounds_serving").to_number<int64_t>();
    }
  }
  return total;
}

int64_t Cluster::ProducersRssAnonKb() const {
  int64_t total = 0;
  for (const auto& producer : producers_) total += producer->RssAnonKb();
  return total;
}

InFlightResult MeasureWithInFlight(Cluster& cluster, ConsumerEngine& probe,
                                   const std::shared_ptr<Region>& background_region, int peers, int in_flight,
                                   int probes, const std::string& tag) {
  auto& producers = cluster.producers();
  const std::string consumer_socket = cluster.consumer().socket_path();
  InFlightResult result;

  // N-1 loads that stay in flight until their engine goes away.
  std::unique_ptr<ConsumerEngine> background;
  const int others = in_flight - 1;
  if (others > 0) {
    if (background_region->num_blocks() < static_cast<uint64_t>(others))
      throw BenchError("background region too small");
    background =
        std::make_unique<ConsumerEngine>(consumer_socket, cluster.block_len(), "bench-background", background_region);
    std::vector<std::string> lines;
    for (int i = 0; i < others; ++i) {
      const auto index = static_cast<uint32_t>(i);
      const std::string& peer = producers[static_cast<size_t>(i % peers)]->listen();
      lines.push_back(
          request::Load(i, peer, tag + "-bg-" + std::to_string(i), {BlockKey(kBackgroundSpace, index)}, {index}));
    }
    Pipeline(background->client, lines, "background load");
    // Every producer has received its fetches once its rounds show them.
    const int64_t deadline = NowNs() + int64_t{20} * 1000000000;
    while (cluster.RoundsServing(peers) < others) {
      if (NowNs() > deadline) throw BenchError("background loads did not reach the producers within 20 s");
      SleepUs(2000);
    }
  }
  result.consumer_rss_anon_kb = cluster.consumer().RssAnonKb();
  result.producers_rss_anon_kb = cluster.ProducersRssAnonKb();

  Region& region = *probe.region;
  for (int i = 0; i < probes; ++i) {
    const int p = i % peers;
    const auto index = static_cast<uint32_t>(static_cast<uint64_t>(i) % cluster.source_blocks());
    const auto space = static_cast<uint32_t>(p + 1);
    const auto slot = static_cast<uint32_t>(static_cast<uint64_t>(i) % region.num_blocks());
    const std::string& peer = producers[static_cast<size_t>(p)]->listen();
    const std::string kv = tag + "-probe-" + std::to_string(i);
    const std::vector<std::string> keys = {BlockKey(space, index)};
    const std::string first = request::Lookup(peer, kv, keys, false, request::kLookupWaitMs);
    const std::string& again = first;  // one call resolves it; asked again only if the wait ran out
    const std::string load = request::Load(i, peer, kv, keys, {slot});
    const std::string poll = request::Poll(1000);
    region.Scribble(slot);

    const int64_t t0 = NowNs();
    LookupCounts counts = CountLookup(probe.client.Call(first, "lookup"));
    while (counts.retry > 0) counts = CountLookup(probe.client.Call(again, "lookup"));
    if (counts.hit != 1) throw BenchError("probe lookup on " + peer + " did not hit");
    probe.client.Call(load, "load");
    bool done = false;
    while (!done) {
      json::object report = probe.client.Call(poll, "poll");
      for (const json::value& item : report.at("results").as_array()) {
        const json::object& r = item.as_object();
        if (r.at("job_id").to_number<int64_t>() != i)
          throw BenchError("probe: unexpected result " + json::serialize(r));
        CheckResult(r);
        done = true;
      }
    }
    const int64_t t1 = NowNs();
    result.latencies_us.push_back(static_cast<double>(t1 - t0) / 1e3);
    if (!region.Verify(slot, SourceId(space, index))) throw BenchError("probe: block " + kv + " holds wrong bytes");
    ++result.verified_blocks;
    probe.client.Call(request::Finish(kv), "finish");
  }

  if (background) {
    // Closing the engine finishes its requests: the loads fail and the
    // producers' rounds end.
    background->client.Close();
    background.reset();
    const int64_t deadline = NowNs() + int64_t{20} * 1000000000;
    while (cluster.RoundsServing(peers) > 0) {
      if (NowNs() > deadline) throw BenchError("background loads did not end within 20 s of their engine closing");
      SleepUs(2000);
    }
  }
  return result;
}

// The flow of an engine that starts N requests in one scheduler step and
// does not spin (docs/performance.md, "What is measured"): N pipelined
// lookups (queued, answered at once), one flush, the loads of the keys that
// hit already, then one pipelined `lookup{wait_ms}` per request still
// `retry` (the first waits for its answer, those after it mostly find theirs
// there), their loads, and `poll{wait_ms}` until every result is in.
BurstResult RunBurst(Cluster& cluster, ConsumerEngine& engine, int peers, int requests, const std::string& tag) {
  auto& producers = cluster.producers();
  Region& region = *engine.region;
  if (region.num_blocks() < static_cast<uint64_t>(requests)) throw BenchError("burst region too small");
  struct Request {
    std::string peer, kv;
    std::vector<std::string> keys;
    uint32_t space, index;
    std::string waiting_lookup, load;
    int64_t done_ns = 0;
  };
  std::vector<Request> reqs(static_cast<size_t>(requests));
  std::vector<std::string> first_lines;
  for (int i = 0; i < requests; ++i) {
    Request& r = reqs[static_cast<size_t>(i)];
    const int p = i % peers;
    r.peer = producers[static_cast<size_t>(p)]->listen();
    r.kv = tag + "-" + std::to_string(i);
    r.space = static_cast<uint32_t>(p + 1);
    r.index = static_cast<uint32_t>(static_cast<uint64_t>(i) % cluster.source_blocks());
    r.keys = {BlockKey(r.space, r.index)};
    r.waiting_lookup = request::Lookup(r.peer, r.kv, r.keys, false, request::kLookupWaitMs);
    r.load = request::Load(i, r.peer, r.kv, r.keys, {static_cast<uint32_t>(i)});
    first_lines.push_back(request::Lookup(r.peer, r.kv, r.keys, false));
    region.Scribble(static_cast<uint64_t>(i));
  }

  BurstResult result;
  const int64_t start = NowNs();
  std::vector<int> pending;  // lookups answered retry
  std::vector<int> ready;    // answered hit, load not sent yet
  auto classify = [&](int i, const json::object& answer) {
    LookupCounts counts = CountLookup(answer);
    if (counts.miss > 0) throw BenchError("burst: lookup of a published key missed");
    (counts.retry > 0 ? pending : ready).push_back(i);
  };
  auto send_loads = [&] {
    std::vector<std::string> lines;
    for (int i : ready) lines.push_back(reqs[static_cast<size_t>(i)].load);
    if (!lines.empty()) Pipeline(engine.client, lines, "burst load");
    ready.clear();
  };
  {
    auto answers = Pipeline(engine.client, first_lines, "burst lookup");
    for (int i = 0; i < requests; ++i) classify(i, answers[static_cast<size_t>(i)]);
  }
  engine.client.Call(request::Flush(), "flush");
  send_loads();
  while (!pending.empty()) {  // more than once only if a wait ran out
    std::vector<int> asking = std::move(pending);
    pending.clear();
    std::vector<std::string> lines;
    for (int i : asking) lines.push_back(reqs[static_cast<size_t>(i)].waiting_lookup);
    auto answers = Pipeline(engine.client, lines, "burst waiting lookup");
    for (size_t j = 0; j < asking.size(); ++j) classify(asking[j], answers[j]);
    send_loads();
  }
  int finished = 0;
  while (finished < requests) {
    json::object report = engine.client.Call(request::Poll(1000), "poll");
    const int64_t now = NowNs();
    for (const json::value& item : report.at("results").as_array()) {
      const json::object& r = item.as_object();
      CheckResult(r);
      reqs[static_cast<size_t>(r.at("job_id").to_number<int64_t>())].done_ns = now;
      ++finished;
    }
  }
  int64_t last = start;
  for (int i = 0; i < requests; ++i) {
    const Request& r = reqs[static_cast<size_t>(i)];
    result.latencies_us.push_back(static_cast<double>(r.done_ns - start) / 1e3);
    last = std::max(last, r.done_ns);
    if (!region.Verify(static_cast<uint64_t>(i), SourceId(r.space, r.index))) {
      throw BenchError("burst: block of " + r.kv + " holds wrong bytes");
    }
    ++result.verified_blocks;
  }
  result.seconds = static_cast<double>(last - start) / 1e9;
  std::vector<std::string> finishes;
  for (const Request& r : reqs) finishes.push_back(request::Finish(r.kv));
  Pipeline(engine.client, finishes, "finish");
  return result;
}

}  // namespace kvpeer::bench
