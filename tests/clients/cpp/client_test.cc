// kvpeer/client.h against real kvpeerd processes (tests/clients/cpp/
// daemon_process.h): every op of control-api.md section 2, pipelining,
// typed errors, and a block moved between two daemons byte for byte.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

#include "kvpeer/client.h"
#include "tests/clients/cpp/daemon_process.h"
#include "tests/clients/cpp/memfd_region.h"

namespace kvpeer {
namespace {

using test::DaemonProcess;
using test::MemfdRegion;

constexpr uint64_t kBlockLen = 4096;

HelloSettings Settings(const std::string& name) { return HelloSettings{name, kBlockLen, "client-test", "seed-1"}; }

std::string Key(uint32_t n) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016x", n);
  return text;
}

// A connected engine session with a registered region of `blocks` blocks.
Client Engine(const DaemonProcess& daemon, const std::string& name, MemfdRegion& region) {
  Result<Client> client = Client::Connect(daemon.socket());
  REQUIRE(client.ok());
  Client engine = std::move(client).value();
  REQUIRE(engine.Hello(Settings(name)).ok());
  Result<RegionInfo> info = engine.RegisterRegionFd(region.fd(), region.num_blocks());
  REQUIRE(info.ok());
  CHECK(info.value().bytes == region.bytes());
  return engine;
}

// Polls until `count` job results have arrived (at most 10 s).
std::vector<JobResult> WaitResults(Client& engine, size_t count) {
  std::vector<JobResult> results;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (results.size() < count && std::chrono::steady_clock::now() < deadline) {
    Result<PollReport> report = engine.Poll(200);
    REQUIRE(report.ok());
    for (JobResult& job : report.value().results) results.push_back(std::move(job));
  }
  return results;
}

TEST_CASE("Client: a socket nobody listens on is a connection error naming the path") {
  Result<Client> client = Client::Connect("/nonexistent/kvpeerd.sock");
  REQUIRE_FALSE(client.ok());
  CHECK(client.error().code == ErrorCode::kConnection);
  CHECK(client.error().message.find("/nonexistent/kvpeerd.sock") != std::string::npos);
}

TEST_CASE("Client: the daemon's errors arrive as their codes and leave the client usable") {
  DaemonProcess daemon("errors");
  Result<Client> connected = Client::Connect(daemon.socket());
  REQUIRE(connected.ok());
  Client& engine = connected.value();

  Result<uint64_t> before_hello = engine.Publish({Key(1)}, {0});
  REQUIRE_FALSE(before_hello.ok());
  CHECK(before_hello.error().code == ErrorCode::kBadRequest);

  Result<HelloInfo> hello = engine.Hello(Settings("errors"));
  REQUIRE(hello.ok());
  CHECK(hello.value().wire_version == "1.1");
  CHECK_FALSE(hello.value().node_id.empty());

  Result<uint64_t> no_region = engine.Publish({Key(1)}, {0});
  REQUIRE_FALSE(no_region.ok());
  CHECK(no_region.error().code == ErrorCode::kNoRegion);

  MemfdRegion region(4, kBlockLen);
  REQUIRE(engine.RegisterRegionFd(region.fd(), region.num_blocks()).ok());
  Result<uint64_t> out_of_range = engine.Publish({Key(1)}, {4});
  REQUIRE_FALSE(out_of_range.ok());
  CHECK(out_of_range.error().code == ErrorCode::kOutOfRange);
  CHECK(out_of_range.error().message.find("4") != std::string::npos);

  Result<RegionInfo> second_region = engine.RegisterRegionFd(region.fd(), 1);
  REQUIRE_FALSE(second_region.ok());
  CHECK(second_region.error().code == ErrorCode::kConflict);

  // A second engine whose settings differ from the node's (fixed by the first).
  Result<Client> other = Client::Connect(daemon.socket());
  REQUIRE(other.ok());
  HelloSettings different = Settings("other");
  different.block_len = kBlockLen * 2;
  Result<HelloInfo> refused = other.value().Hello(different);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kIncompatible);

  Result<uint64_t> published = engine.Publish({Key(1), Key(2)}, {0, 1});
  REQUIRE(published.ok());
  CHECK(published.value() == 2);
  Result<UnpublishResult> unpublished = engine.Unpublish({Key(1), Key(2)});
  REQUIRE(unpublished.ok());
  CHECK(unpublished.value().released.size() == 2);
  CHECK(unpublished.value().pinned.empty());
}

TEST_CASE("Client: strings that JSON must escape travel intact") {
  DaemonProcess daemon("escape");
  Result<Client> connected = Client::Connect(daemon.socket());
  REQUIRE(connected.ok());
  HelloSettings settings = Settings("quote\" backslash\\ newline\n tab\t");
  REQUIRE(connected.value().Hello(settings).ok());
  Result<Answer> status = connected.value().Status();
  REQUIRE(status.ok());
  CHECK(status.value().text().find("quote\\\" backslash\\\\ newline\\n tab\\t") != std::string::npos);
}

TEST_CASE("Client: a block published on one node is looked up and loaded byte for byte on another") {
  DaemonProcess producer("producer");
  DaemonProcess consumer("consumer");
  MemfdRegion source(8, kBlockLen);
  MemfdRegion destination(8, kBlockLen);
  for (uint32_t i = 0; i < 8; ++i) source.Fill(i, 1000 + i);
  Client a = Engine(producer, "producer", source);
  Client b = Engine(consumer, "consumer", destination);
  REQUIRE(a.Publish({Key(10), Key(11), Key(12)}, {0, 1, 2}, /*seal=*/true).ok());

  Result<std::vector<Probe>> probes =
      b.Lookup(producer.listen(), "req-1", {Key(10), Key(11), Key(99)}, LookupOptions{.wait_ms = 5000});
  REQUIRE(probes.ok());
  CHECK(probes.value() == std::vector<Probe>{Probe::kHit, Probe::kHit, Probe::kMiss});

  REQUIRE(b.Load(7, producer.listen(), "req-1", {Key(10), Key(11)}, {5, 6}).ok());
  std::vector<JobResult> results = WaitResults(b, 1);
  REQUIRE(results.size() == 1);
  CHECK(results[0].job_id == 7);
  CHECK(results[0].kv_request_id == "req-1");
  CHECK(results[0].success);
  CHECK(destination.Holds(5, 1000));
  CHECK(destination.Holds(6, 1001));
  REQUIRE(b.Finish("req-1").ok());

  // A load of a key the open round did not answer `hit` is refused.
  Result<std::vector<Probe>> again = b.Lookup(producer.listen(), "req-2", {Key(12)}, LookupOptions{.wait_ms = 5000});
  REQUIRE(again.ok());
  Result<void> unprobed = b.Load(8, producer.listen(), "req-2", {Key(10)}, {4});
  REQUIRE_FALSE(unprobed.ok());
  CHECK(unprobed.error().code == ErrorCode::kBadRequest);
}

TEST_CASE("Client: disaggregated prefill, a store on one node fetched by a load on the other") {
  DaemonProcess prefill("prefill");
  DaemonProcess decode("decode");
  MemfdRegion source(4, kBlockLen);
  MemfdRegion destination(4, kBlockLen);
  source.Fill(2, 77);
  Client a = Engine(prefill, "prefill", source);
  Client b = Engine(decode, "decode", destination);
  REQUIRE(a.Store(1, "pd-1", {Key(500)}, {2}).ok());
  REQUIRE(b.Load(1, prefill.listen(), "pd-1", {Key(500)}, {3}).ok());
  std::vector<JobResult> loaded = WaitResults(b, 1);
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].success);
  CHECK(destination.Holds(3, 77));
  std::vector<JobResult> stored = WaitResults(a, 1);
  REQUIRE(stored.size() == 1);
  CHECK(stored[0].job_id == 1);
  CHECK(stored[0].success);
}

TEST_CASE("Client: pipelined requests are answered in order") {
  DaemonProcess producer("pipe-a");
  DaemonProcess consumer("pipe-b");
  MemfdRegion source(64, kBlockLen);
  MemfdRegion destination(64, kBlockLen);
  Client a = Engine(producer, "pipe-a", source);
  Client b = Engine(consumer, "pipe-b", destination);
  std::vector<std::string> keys;
  std::vector<BlockId> ids;
  for (uint32_t i = 0; i < 32; ++i) {
    keys.push_back(Key(i));
    ids.push_back(i);
  }
  REQUIRE(a.Publish(keys, ids).ok());
  for (uint32_t i = 0; i < 64; ++i) {
    // Even requests ask for a published key, odd ones for a missing one.
    const std::string key = i % 2 == 0 ? Key(i / 2) : Key(1000 + i);
    REQUIRE(b.Send(request::Lookup(producer.listen(), "p-" + std::to_string(i), {key})).ok());
  }
  REQUIRE(b.Send(request::Flush()).ok());
  for (uint32_t i = 0; i < 64; ++i) {
    Result<Answer> answer = b.Receive();
    REQUIRE(answer.ok());
    Result<std::vector<Probe>> probes = answer::Lookup(answer.value());
    REQUIRE(probes.ok());
    REQUIRE(probes.value().size() == 1);
  }
  Result<Answer> flushed = b.Receive();
  REQUIRE(flushed.ok());
  REQUIRE(answer::Flush(flushed.value()).ok());
  // The same requests again, now that the probes were answered.
  for (uint32_t i = 0; i < 64; ++i) {
    const std::string key = i % 2 == 0 ? Key(i / 2) : Key(1000 + i);
    Result<std::vector<Probe>> probes =
        b.Lookup(producer.listen(), "p-" + std::to_string(i), {key}, LookupOptions{.wait_ms = 5000});
    REQUIRE(probes.ok());
    CHECK(probes.value()[0] == (i % 2 == 0 ? Probe::kHit : Probe::kMiss));
  }
}

TEST_CASE("Client: a daemon that dies is a connection error, and the client stays closed") {
  DaemonProcess daemon("dies");
  Result<Client> connected = Client::Connect(daemon.socket());
  REQUIRE(connected.ok());
  Client& engine = connected.value();
  REQUIRE(engine.Hello(Settings("dies")).ok());
  daemon.Stop(SIGKILL);
  Result<PollReport> report = engine.Poll(0);
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().code == ErrorCode::kConnection);
  CHECK_FALSE(engine.open());
  Result<uint64_t> after = engine.Flush();
  REQUIRE_FALSE(after.ok());
  CHECK(after.error().code == ErrorCode::kConnection);
}

TEST_CASE("answer: lines that break the API's promises are kBadAnswer naming what is wrong") {
  Result<Answer> not_json = Answer::Parse("{oops");
  REQUIRE_FALSE(not_json.ok());
  CHECK(not_json.error().code == ErrorCode::kBadAnswer);

  Result<Answer> no_results = Answer::Parse(R"({"id":null,"ok":true})");
  REQUIRE(no_results.ok());
  Result<std::vector<Probe>> probes = answer::Lookup(no_results.value());
  REQUIRE_FALSE(probes.ok());
  CHECK(probes.error().code == ErrorCode::kBadAnswer);
  CHECK(probes.error().message.find("'results'") != std::string::npos);

  Result<Answer> odd_probe = Answer::Parse(R"({"ok":true,"results":["hit","maybe"]})");
  REQUIRE(odd_probe.ok());
  CHECK(answer::Lookup(odd_probe.value()).error().code == ErrorCode::kBadAnswer);

  Result<Answer> negative_id = Answer::Parse(R"({"ok":true,"released":[-1],"pinned":[]})");
  REQUIRE(negative_id.ok());
  CHECK(answer::Unpublish(negative_id.value()).error().code == ErrorCode::kBadAnswer);

  Result<Answer> newer_code = Answer::Parse(R"({"ok":false,"error":{"code":"brand_new","message":"m"}})");
  REQUIRE(newer_code.ok());
  Result<void> status = newer_code.value().Status();
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code == ErrorCode::kUnknownCode);
  CHECK(status.error().message == "m");
}

TEST_CASE("ErrorCode: every API code round-trips through its wire name") {
  for (ErrorCode code :
       {ErrorCode::kBadRequest, ErrorCode::kUnknownOp, ErrorCode::kIncompatible, ErrorCode::kNoRegion,
        ErrorCode::kOutOfRange, ErrorCode::kConflict, ErrorCode::kNotFound, ErrorCode::kPeerUnavailable,
        ErrorCode::kTooLarge, ErrorCode::kShuttingDown, ErrorCode::kInternal}) {
    CHECK(ErrorCodeFromName(ErrorCodeName(code)) == code);
  }
  CHECK(ErrorCodeFromName("nonsense") == ErrorCode::kUnknownCode);
}

}  // namespace
}  // namespace kvpeer
