// Metrics: the registry and its text exposition (checked by a strict parser
// of the exposition format, and by promtool when it is installed), the
// reason labels, the `metrics` text of the control side, the peer side's
// instrumentation over real connections, and the HTTP listener.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "daemon/api/api_error.h"
#include "daemon/node/published_blocks.h"
#include "daemon/metrics/counters.h"
#include "daemon/metrics/metrics.h"
#include "daemon/metrics/metrics_http.h"
#include "daemon/control/metrics_text.h"
#include "daemon/node/node_model.h"
#include "daemon/peer/peer_manager.h"
#include "daemon/node/shm_region.h"
#include "protocol/frame.h"
#include "tests/daemon/daemon_fixture.h"
#include "tests/daemon/metrics/exposition_check.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using testing::CheckExposition;
using testing::ParsedSample;
using testing::SampleValue;

std::string Joined(const std::vector<std::string>& problems) {
  std::string text;
  for (const std::string& problem : problems) text += problem + "\n";
  return text;
}

// Strictly well formed, and accepted by promtool where it is installed
// (Debian: apt-get install prometheus).
void RequireWellFormed(const std::string& text, std::vector<ParsedSample>* samples = nullptr) {
  std::vector<std::string> problems = CheckExposition(text, samples);
  INFO(text);
  INFO(Joined(problems));
  REQUIRE(problems.empty());
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) return;
  char path[] = "/tmp/kvpeer-metrics-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path, std::ios::binary) << text;
  const std::string command = std::string("promtool check metrics < ") + path + " > " + path + ".out 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream out(std::string(path) + ".out");
  std::string report((std::istreambuf_iterator<char>(out)), {});
  ::unlink(path);
  ::unlink((std::string(path) + ".out").c_str());
  INFO("promtool: " << report);
  // promtool exits 3 for lint findings only (naming advice), 1 for errors.
  CHECK((WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3)));
}

// ---------------------------------------------------------------------------
// The registry and the text format

TEST_CASE("a registry writes HELP and TYPE once per family, then its samples sorted by labels") {
  metrics::Registry registry;
  auto& requests = registry.Counter("demo_requests_total", "Requests by op.", {"op"});
  requests.Add({"status"}, 2);
  requests.Add({"lookup"}, 5);
  requests.Add({"status"}, 1);
  registry.Gauge("demo_temperature", "Degrees.").Set({}, -1.5);
  auto& latency = registry.Histogram("demo_latency_seconds", "Latency.", {0.1, 1});
  metrics::Histogram observed({0.1, 1});
  observed.Observe(0.05);
  observed.Observe(0.1);  // le is inclusive
  observed.Observe(0.5);
  observed.Observe(7);
  latency.Merge({}, observed);
  registry.Counter("demo_empty_total", "Never counted.", {"x"});  // no samples: left out

  const std::string expected =
      "# HELP demo_requests_total Requests by op.\n"
      "# TYPE demo_requests_total counter\n"
      "demo_requests_total{op=\"lookup\"} 5\n"
      "demo_requests_total{op=\"status\"} 3\n"
      "# HELP demo_temperature Degrees.\n"
      "# TYPE demo_temperature gauge\n"
      "demo_temperature -1.5\n"
      "# HELP demo_latency_seconds Latency.\n"
      "# TYPE demo_latency_seconds histogram\n"
      "demo_latency_seconds_bucket{le=\"0.1\"} 2\n"
      "demo_latency_seconds_bucket{le=\"1\"} 3\n"
      "demo_latency_seconds_bucket{le=\"+Inf\"} 4\n"
      "demo_latency_seconds_sum 7.65\n"
      "demo_latency_seconds_count 4\n";
  CHECK(registry.Text() == expected);
  RequireWellFormed(registry.Text());
}

TEST_CASE("label values are escaped and made valid UTF-8; HELP text is escaped") {
  CHECK(metrics::EscapeLabelValue("plain") == "plain");
  CHECK(metrics::EscapeLabelValue("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(metrics::EscapeLabelValue("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(metrics::EscapeLabelValue("bad\xFF") == "bad\xEF\xBF\xBD");
  CHECK(metrics::EscapeLabelValue("\xC0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong NUL

  metrics::Registry registry;
  registry.Gauge("demo_peer_info", "Help with a \\ and a\nnewline.", {"peer"}).Set({"node \"x\"\\\n\xFF"}, 1);
  const std::string text = registry.Text();
  CHECK(text ==
        "# HELP demo_peer_info Help with a \\\\ and a\\nnewline.\n"
        "# TYPE demo_peer_info gauge\n"
        "demo_peer_info{peer=\"node \\\"x\\\"\\\\\\n\xEF\xBF\xBD\"} 1\n");
  std::vector<ParsedSample> samples;
  RequireWellFormed(text, &samples);
  REQUIRE(samples.size() == 1);
  CHECK(samples[0].labels[0].second == "node \"x\"\\\n\xEF\xBF\xBD");
}

TEST_CASE("sample values are exact integers, shortest decimals or the special values") {
  CHECK(metrics::FormatValue(0) == "0");
  CHECK(metrics::FormatValue(42) == "42");
  CHECK(metrics::FormatValue(-3) == "-3");
  CHECK(metrics::FormatValue(1e6) == "1000000");
  CHECK(metrics::FormatValue(4294967296.0) == "4294967296");
  CHECK(metrics::FormatValue(0.25) == "0.25");
  CHECK(metrics::FormatValue(0.0001) == "0.0001");
  CHECK(metrics::FormatValue(HUGE_VAL) == "+Inf");
  CHECK(metrics::FormatValue(-HUGE_VAL) == "-Inf");
  CHECK(metrics::FormatValue(std::nan("")) == "NaN");
  CHECK(std::stod(metrics::FormatValue(1e-7)) == 1e-7);
  CHECK(std::stod(metrics::FormatValue(1e300)) == 1e300);
}

TEST_CASE("bad names, labels, buckets and redeclarations are refused") {
  metrics::Registry registry;
  CHECK_THROWS_AS(registry.Counter("1bad", "x"), std::logic_error);
  CHECK_THROWS_AS(registry.Counter("bad-name", "x"), std::logic_error);
  CHECK_THROWS_AS(registry.Counter("ok_total", "x", {"__reserved"}), std::logic_error);
  CHECK_THROWS_AS(registry.Counter("ok_total", "x", {"a", "a"}), std::logic_error);
  CHECK_THROWS_AS(registry.Histogram("h", "x", {1, 1}), std::logic_error);
  CHECK_THROWS_AS(registry.Histogram("h", "x", {2, 1}), std::logic_error);
  CHECK_THROWS_AS(registry.Histogram("h", "x", {HUGE_VAL}), std::logic_error);
  CHECK_THROWS_AS(registry.Histogram("h", "x", {1}, {"le"}), std::logic_error);

  auto& counter = registry.Counter("c_total", "x", {"a"});
  CHECK(&registry.Counter("c_total", "x", {"a"}) == &counter);  // the same family again
  CHECK_THROWS_AS(registry.Gauge("c_total", "x", {"a"}), std::logic_error);
  CHECK_THROWS_AS(registry.Counter("c_total", "other help", {"a"}), std::logic_error);
  CHECK_THROWS_AS(counter.Add({"1", "2"}, 1), std::logic_error);  // wrong arity
  CHECK_THROWS_AS(counter.Set({"1"}, 1), std::logic_error);       // a counter is not set

  registry.Histogram("lat", "x", {1});
  CHECK_THROWS_AS(registry.Counter("lat_count", "x"), std::logic_error);  // collides with the histogram
  registry.Gauge("g_sum", "x");
  CHECK_THROWS_AS(registry.Histogram("g", "x", {1}), std::logic_error);

  metrics::Histogram a({1, 2});
  metrics::Histogram b({1, 3});
  CHECK_THROWS_AS(a.Merge(b), std::logic_error);
}

TEST_CASE("the strict checker itself refuses malformed expositions") {
  const auto problems = [](const std::string& text) { return CheckExposition(text).size(); };
  const std::string ok = "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n";
  CHECK(problems(ok) == 0);
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\na_total 1") > 0);     // no final newline
  CHECK(problems("a_total 1\n") > 0);                                              // no TYPE
  CHECK(problems("# TYPE a_total counter\na_total 1\n") > 0);                      // no HELP
  CHECK(problems(ok + "# TYPE a_total counter\n") > 0);                            // TYPE twice / after samples
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\na_total -1\n") > 0);  // negative counter
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\",} 1\n") > 0);   // trailing comma
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"\\t\"} 1\n") > 0);  // bad escape
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"1\"} 2\n") > 0);
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\na_total 1 1700000000\n") > 0);  // timestamp
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\na_total one\n") > 0);
  CHECK(problems("# HELP a_total A.\n# TYPE a_total counter\n\na_total 1\n") > 0);  // empty line
  CHECK(problems("# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\na 1\nb 1\na{x=\"2\"} 1\n") > 0);
  const std::string head = "# HELP h H.\n# TYPE h histogram\n";
  CHECK(problems(head + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n") == 0);
  CHECK(problems(head + "h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n") > 0);  // decreasing
  CHECK(problems(head + "h_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n") > 0);                           // no +Inf
  CHECK(problems(head + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 3\n") > 0);  // +Inf != count
  CHECK(problems(head + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n") >
        0);                                                            // le not increasing
  CHECK(problems(head + "h_bucket{le=\"+Inf\"} 1\nh_count 1\n") > 0);  // no _sum
  CHECK(problems(head + "h 1\n") > 0);                                 // bare histogram sample
  CHECK(problems(head + "h_count{le=\"1\"} 1\n") > 0);                 // le on _count
}

// ---------------------------------------------------------------------------
// The control side's text

TEST_CASE("the metrics text of the control side is well formed, with labelled control counters") {
  Counters counters;
  counters.Add(Counter::kRequests, 7);
  counters.Add(CounterFamily::kControlRequests, ControlRequestLabel("status"), 3);
  counters.Add(CounterFamily::kControlRequests, ControlRequestLabel("no_such_op"), 1);
  counters.Add(CounterFamily::kControlErrors, ApiErrorIndex(Status::UnknownOp("x")), 1);
  counters.Add(CounterFamily::kStoreFailures, StoreFailureLabel(session::JobFailure::kTimeout), 2);
  counters.Add(Counter::kStoreResultsFailed, 2);
  counters.Add(Counter::kConfigReloads, 1);
  MetricsInput input;
  input.uptime_s = 12;
  input.engines = 2;
  input.published_keys = 10;
  input.pins = 4;
  input.counters = &counters;
  PeerSnapshot ready;
  ready.peer_id = "node-b:5710";
  ready.state = PeerState::kReady;
  ready.counters.bytes_sent = 10;
  ready.counters.bytes_received = 20;
  ready.loads_in_flight = 1;
  input.peers.push_back(ready);
  PeerSnapshot backoff;
  backoff.peer_id = "we\"ird\\peer\n:1";
  backoff.state = PeerState::kBackoff;
  input.peers.push_back(backoff);
  std::vector<ParsedSample> samples;
  RequireWellFormed(FormatMetrics(input), &samples);
  CHECK(SampleValue(samples, "kvpeer_up") == 1);
  CHECK(SampleValue(samples, "kvpeer_pins") == 4);
  CHECK(SampleValue(samples, "kvpeer_published_keys") == 10);
  CHECK(SampleValue(samples, "kvpeer_peers", {{"state", "ready"}}) == 1);
  CHECK(SampleValue(samples, "kvpeer_peers", {{"state", "backoff"}}) == 1);
  CHECK(SampleValue(samples, "kvpeer_peers", {{"state", "closed"}}) == 0);
  CHECK(SampleValue(samples, "kvpeer_peer_bytes_received_total", {{"peer", "node-b:5710"}}) == 20);
  CHECK(SampleValue(samples, "kvpeer_peer_bytes_sent_total", {{"peer", "we\"ird\\peer\n:1"}}) == 0);
  CHECK(SampleValue(samples, "kvpeer_control_requests_total", {{"op", "status"}}) == 3);
  CHECK(SampleValue(samples, "kvpeer_control_requests_total", {{"op", "unknown"}}) == 1);
  CHECK(SampleValue(samples, "kvpeer_control_errors_total", {{"code", "unknown_op"}}) == 1);
  CHECK(SampleValue(samples, "kvpeer_store_failures_total", {{"reason", "timeout"}}) == 2);
  CHECK(SampleValue(samples, "kvpeer_store_results_failed_total") == 2);
  CHECK(SampleValue(samples, "kvpeer_config_reloads_total") == 1);
  CHECK(SampleValue(samples, "kvpeer_requests_total") == 7);
  CHECK_FALSE(SampleValue(samples, "kvpeer_op_status_total").has_value());
}

TEST_CASE("every declared counter is in status and the metrics at 0 before it is first counted") {
  const Counters counters;
  const std::map<std::string, uint64_t> named = counters.ByName();
  for (const CounterSpec& spec : kCounterSpecs) CHECK(named.at(std::string(spec.name)) == 0);
  CHECK(named.at("op_status") == 0);
  CHECK(named.at("op_unknown") == 0);
  CHECK(named.at("errors_peer_unavailable") == 0);
  CHECK(named.at("store_failures_unfetched") == 0);
  MetricsInput input;
  input.counters = &counters;
  std::vector<ParsedSample> samples;
  RequireWellFormed(FormatMetrics(input), &samples);
  CHECK(SampleValue(samples, "kvpeer_checksum_failures_total") == 0);
  CHECK(SampleValue(samples, "kvpeer_limit_max_round_key_bytes_total") == 0);
  CHECK(SampleValue(samples, "kvpeer_control_requests_total", {{"op", "load"}}) == 0);
  CHECK(SampleValue(samples, "kvpeer_control_errors_total", {{"code", "internal"}}) == 0);
  CHECK(SampleValue(samples, "kvpeer_store_failures_total", {{"reason", "other"}}) == 0);
}

TEST_CASE("a limit's flag names its counter; a flag that is no limit is a programming error") {
  CHECK(LimitCounter("max-queued-bytes") == Counter::kLimitMaxQueuedBytes);
  CHECK(LimitCounter("max-rounds-per-peer") == Counter::kLimitMaxRoundsPerPeer);
  CHECK(LimitCounter("max-round-key-bytes") == Counter::kLimitMaxRoundKeyBytes);
  CHECK_THROWS_AS(LimitCounter("max-everything"), std::logic_error);
  for (size_t i = 0; i < kCounterSpecs.size(); ++i) CHECK(static_cast<size_t>(kCounterSpecs[i].id) == i);
}

// ---------------------------------------------------------------------------
// The peer side over real connections

class RecordingSink : public ResultSink {
 public:
  void OnLoadResult(const session::JobResult& result) override { loads.push_back(result); }
  void OnStoreResult(const session::JobResult& result) override { stores.push_back(result); }
  void OnRequestFailed(const std::string&, const std::string&) override {}
  std::vector<session::JobResult> loads;
  std::vector<session::JobResult> stores;
};

constexpr uint64_t kBlockLen = 4096;

// One node's peer side: a PeerManager over its own index, with one engine
// region of four blocks.
struct Node {
  Node(asio::io_context& io, const std::string& fingerprint)
      : model(kBlockLen, fingerprint, "seed"), memfd(testing::MakeMemfd(4 * kBlockLen)) {
    REQUIRE(ShmRegion::MapFd(memfd.get(), {4, kBlockLen, 0}, &region).ok());
    index.AddEngine(1, region, nullptr);
    PeerManagerConfig config;
    config.listen_host = "127.0.0.1";
    config.listen_port = 0;
    config.handshake_timeout = std::chrono::seconds(5);
    peers = std::make_unique<PeerManager>(io, config, model, index, sink);
    REQUIRE(peers->Listen().ok());
    peers->set_node_id(peers->listen_address());
  }
  std::vector<ParsedSample> Scrape() const {
    MetricsInput input;
    input.peers = peers->PeerSnapshots();
    input.peer_service = peers.get();
    std::vector<ParsedSample> samples;
    RequireWellFormed(FormatMetrics(input), &samples);
    return samples;
  }

  NodeModel model;
  NodePublishedBlocks index;
  UniqueFd memfd;
  std::shared_ptr<ShmRegion> region;
  RecordingSink sink;
  std::unique_ptr<PeerManager> peers;
};

using testing::RunUntil;

// Captures the log lines of a test; restores the default logger after.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)), previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::debug);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  bool Has(const std::string& part) const {
    for (const std::string& line : sink_->last_formatted()) {
      if (line.find(part) != std::string::npos) return true;
    }
    return false;
  }
  std::string All() const {
    std::string text;
    for (const std::string& line : sink_->last_formatted()) text += line;
    return text;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_CASE("lookups, loads and closes are counted per peer and timed, on both sides of a real connection") {
  LogCapture log;
  asio::io_context io;
  Node a(io, "fp");
  Node b(io, "fp");
  const std::vector<protocol::Key> keys = {"00aa", "00bb"};
  REQUIRE(a.index.Publish(1, keys, {0, 1}).ok());
  const std::string peer_a = a.peers->listen_address();

  std::vector<session::ProbeAnswer> answers;
  REQUIRE(b.peers->Lookup(peer_a, "req-1", keys, true, &answers).ok());
  REQUIRE(RunUntil(io, [&] {
    b.peers->Lookup(peer_a, "req-1", keys, false, &answers).IgnoreError();  // polled until both answers are in
    return answers == std::vector<session::ProbeAnswer>{session::ProbeAnswer::kHit, session::ProbeAnswer::kHit};
  }));
  REQUIRE(b.peers->Load(7, peer_a, "req-1", keys, {2, 3}, MakeSlotSink(b.region)).ok());
  REQUIRE(RunUntil(io, [&] { return !b.sink.loads.empty(); }));
  REQUIRE(b.sink.loads[0].success);

  const std::string peer_b = b.peers->listen_address();
  std::vector<ParsedSample> on_b = b.Scrape();
  CHECK(SampleValue(on_b, "kvpeer_peer_lookup_keys_sent_total", {{"peer", peer_a}}) == 2);
  CHECK(SampleValue(on_b, "kvpeer_peer_lookup_hits_received_total", {{"peer", peer_a}}) == 2);
  CHECK(SampleValue(on_b, "kvpeer_peer_frames_sent_total", {{"peer", peer_a}, {"type", "lookup"}}) == 1);
  CHECK(SampleValue(on_b, "kvpeer_peer_frames_sent_total", {{"peer", peer_a}, {"type", "fetch"}}) == 1);
  CHECK(SampleValue(on_b, "kvpeer_peer_frames_received_total", {{"peer", peer_a}, {"type", "block_data"}}) >= 1);
  CHECK(SampleValue(on_b, "kvpeer_peer_loads_total",
                    {{"peer", peer_a}, {"outcome", "succeeded"}, {"reason", "none"}}) == 1);
  CHECK(SampleValue(on_b, "kvpeer_peer_dials_total", {{"peer", peer_a}}) == 1);
  CHECK(SampleValue(on_b, "kvpeer_peer_sessions_total", {{"peer", peer_a}}) == 1);
  CHECK(SampleValue(on_b, "kvpeer_peer_write_queue_frames", {{"peer", peer_a}}) == 0);
  CHECK(SampleValue(on_b, "kvpeer_lookup_round_trip_seconds_count") == 1);
  CHECK(SampleValue(on_b, "kvpeer_load_duration_seconds_count", {{"outcome", "succeeded"}}) == 1);
  CHECK(SampleValue(on_b, "kvpeer_load_transfer_bytes_count") == 1);
  CHECK(SampleValue(on_b, "kvpeer_load_transfer_bytes_sum") == 2 * kBlockLen);
  CHECK(SampleValue(on_b, "kvpeer_load_transfer_bytes_bucket", {{"le", "16384"}}) == 1);
  CHECK(SampleValue(on_b, "kvpeer_load_transfer_bytes_bucket", {{"le", "4096"}}) == 0);

  std::vector<ParsedSample> on_a = a.Scrape();
  CHECK(SampleValue(on_a, "kvpeer_peer_lookup_keys_served_total", {{"peer", peer_b}}) == 2);
  CHECK(SampleValue(on_a, "kvpeer_peer_lookup_hits_served_total", {{"peer", peer_b}}) == 2);
  CHECK(SampleValue(on_a, "kvpeer_peer_frames_sent_total", {{"peer", peer_b}, {"type", "transfer_done"}}) == 1);
  CHECK(SampleValue(on_a, "kvpeer_peer_dials_total", {{"peer", peer_b}}) == 0);

  // The operator closes B's session: "operator" on B, "peer_disconnected" on A.
  REQUIRE(b.peers->Disconnect(peer_a).ok());
  REQUIRE(RunUntil(io, [&] {
    auto value = SampleValue(a.Scrape(), "kvpeer_peer_sessions_closed_total", {{"reason", "peer_disconnected"}});
    return value && *value == 1;
  }));
  on_b = b.Scrape();
  CHECK(SampleValue(on_b, "kvpeer_peer_sessions_closed_total", {{"reason", "operator"}}) == 1);
  // Counters of a closed connection stay with the peer.
  CHECK(SampleValue(on_b, "kvpeer_peer_lookup_keys_sent_total", {{"peer", peer_a}}) == 2);
  INFO(log.All());
  CHECK(log.Has("peer " + peer_a + " (127.0.0.1:"));
  CHECK(log.Has("): ready (dialled connection)"));
  CHECK(log.Has("session closed (operator): disconnected by operator"));

  a.peers->Shutdown("test over");
  b.peers->Shutdown("test over");
  RunUntil(io, [] { return false; });  // let the coroutines end (returns false after the bound)
}

TEST_CASE("a fingerprint mismatch is a handshake failure on both sides, logged with its reason") {
  LogCapture log;
  asio::io_context io;
  Node a(io, "fp-one");
  Node c(io, "fp-two");
  const std::string peer_a = a.peers->listen_address();
  std::optional<Status> connected;
  c.peers->Connect(peer_a, [&](Status status) { connected = std::move(status); });
  REQUIRE(RunUntil(io, [&] { return connected.has_value(); }));
  REQUIRE_FALSE(connected->ok());
  CHECK(connected->code() == Status::Code::kUnavailable);
  REQUIRE(RunUntil(io, [&] {
    auto value = SampleValue(a.Scrape(), "kvpeer_peer_handshake_failures_total", {{"reason", "config_fingerprint"}});
    return value && *value == 1;
  }));
  CHECK(SampleValue(c.Scrape(), "kvpeer_peer_handshake_failures_total", {{"reason", "config_fingerprint"}}) == 1);
  CHECK(SampleValue(a.Scrape(), "kvpeer_peer_protocol_violations_total", {{"reason", "bad_connect"}}) ==
        std::nullopt);  // a mismatch is counted as a handshake failure only
  INFO(log.All());
  CHECK(log.Has("handshake failed (config_fingerprint): config_fingerprint mismatch"));
  a.peers->Shutdown("test over");
  c.peers->Shutdown("test over");
  RunUntil(io, [] { return false; });
}

TEST_CASE("a peer's disconnect text during the handshake cannot choose the failure's label") {
  // Attack: the peer words its disconnect like a refusal this node would
  // count under a specific label; only an exact fixed reason may do that.
  const std::string said =
      GENERATE(std::string("x authentication failed y"), std::string("peer silent config_fingerprint mismatch"));
  LogCapture log;
  asio::io_context io;
  Node a(io, "fp-one");
  const std::string address = a.peers->listen_address();
  const uint16_t port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  asio::ip::tcp::socket attacker(io);
  attacker.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(attacker, asio::buffer(protocol::EncodeFrame(protocol::Disconnect{said})));
  REQUIRE(RunUntil(io, [&] {
    auto value = SampleValue(a.Scrape(), "kvpeer_peer_handshake_failures_total", {{"reason", "other"}});
    return value && *value == 1;
  }));
  const std::vector<ParsedSample> on_a = a.Scrape();
  for (const char* label : {"authentication", "config_fingerprint", "connection_lost"}) {
    INFO(label);
    CHECK(SampleValue(on_a, "kvpeer_peer_handshake_failures_total", {{"reason", label}}).value_or(0) == 0);
  }
  INFO(log.All());
  CHECK(log.Has("handshake failed (other): peer disconnected: " + said));
  a.peers->Shutdown("test over");
  RunUntil(io, [] { return false; });
}

// ---------------------------------------------------------------------------
// The HTTP listener

// One request over a fresh connection; the whole response.
std::string HttpExchange(uint16_t port, const std::string& request) {
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(socket, asio::buffer(request));
  std::string response;
  boost::system::error_code ec;
  char buffer[4096];
  for (;;) {
    size_t n = socket.read_some(asio::buffer(buffer), ec);
    response.append(buffer, n);
    if (ec) break;
  }
  return response;
}

TEST_CASE("the metrics listener answers GET /metrics with the text and everything else with an error") {
  asio::io_context io;
  int scrapes = 0;
  const std::string body = "# HELP demo_up Up.\n# TYPE demo_up gauge\ndemo_up 1\n";
  MetricsHttpServer server(io, {"127.0.0.1", 0}, [&] {
    ++scrapes;
    return body;
  });
  REQUIRE(server.Start().ok());
  const uint16_t port = static_cast<uint16_t>(std::stoi(server.address().substr(server.address().rfind(':') + 1)));
  auto guard = asio::make_work_guard(io);
  std::thread loop([&] { io.run(); });

  const std::string ok = HttpExchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  CHECK(ok.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(ok.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(ok.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
  CHECK(ok.find("\r\nConnection: close\r\n") != std::string::npos);
  CHECK(ok.ends_with("\r\n\r\n" + body));
  CHECK(HttpExchange(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(HttpExchange(port, "GET /metrics HTTP/1.1\nHost: x\n\n").starts_with("HTTP/1.1 200 OK\r\n"));  // bare LFs
  const std::string head = HttpExchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  CHECK(head.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(head.ends_with("\r\n\r\n"));  // headers only
  CHECK(HttpExchange(port, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 Not Found\r\n"));
  CHECK(HttpExchange(port, "GET /metricsx HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 Not Found\r\n"));
  const std::string post = HttpExchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  CHECK(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
  CHECK(post.find("\r\nAllow: GET, HEAD\r\n") != std::string::npos);
  CHECK(HttpExchange(port, "nonsense\r\n\r\n").starts_with("HTTP/1.1 400 Bad Request\r\n"));
  const std::string huge = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(10000, 'a') + "\r\n\r\n";
  CHECK(HttpExchange(port, huge).starts_with("HTTP/1.1 431 "));

  asio::post(io, [&] { server.Stop(); });
  guard.reset();
  loop.join();
  CHECK(scrapes == 4);  // GET, GET with a query string, GET with bare LFs, HEAD
}

TEST_CASE("the metrics listener reports an address it cannot bind") {
  asio::io_context io;
  MetricsHttpServer first(io, {"127.0.0.1", 0}, [] { return std::string(); });
  REQUIRE(first.Start().ok());
  const uint16_t port = static_cast<uint16_t>(std::stoi(first.address().substr(first.address().rfind(':') + 1)));
  MetricsHttpServer second(io, {"127.0.0.1", port}, [] { return std::string(); });
  const std::string error = second.Start().message();
  CHECK(error.find("cannot listen on metrics-listen 127.0.0.1:" + std::to_string(port)) == 0);
}

}  // namespace
}  // namespace kvpeer::daemon
