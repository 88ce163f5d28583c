// ResultOutbox: results wait until drained, in order, and a drain also
// delivers what the sink's own calls queue.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "daemon/peer/result_outbox.h"

namespace kvpeer::daemon {
namespace {

class LogSink : public ResultSink {
 public:
  void OnLoadResult(const session::JobResult& r) override { log.push_back("load " + std::to_string(r.job_id)); }
  void OnStoreResult(const session::JobResult& r) override { log.push_back("store " + std::to_string(r.job_id)); }
  void OnRequestFailed(const std::string& peer, const std::string& kv) override {
    log.push_back("failed " + peer + " " + kv);
  }
  void OnProbesChanged(const std::string& peer, bool ended) override {
    log.push_back("probes " + peer + (ended ? " ended" : ""));
  }
  std::vector<std::string> log;
};

session::JobResult Result(session::JobId job) { return session::JobResult{job, "kv", true, {}}; }

TEST_CASE("result outbox: nothing is delivered before the drain, then everything in order", "[peer][outbox]") {
  int wakes = 0;
  ResultOutbox outbox([&] { ++wakes; });
  LogSink sink;
  outbox.OnLoadResult(Result(1));
  outbox.OnRequestFailed("p:1", "kv");
  outbox.OnStoreResult(Result(2));
  outbox.OnProbesChanged("p:1", true);
  CHECK(sink.log.empty());
  CHECK(wakes == 1);  // one drain scheduled for the whole batch
  CHECK(outbox.Drain(sink) == 4);
  CHECK(sink.log == std::vector<std::string>{"load 1", "failed p:1 kv", "store 2", "probes p:1 ended"});
  CHECK(outbox.empty());
  outbox.OnLoadResult(Result(3));
  CHECK(wakes == 2);
}

TEST_CASE("result outbox: what the sink queues while draining comes after, in the same drain", "[peer][outbox]") {
  int wakes = 0;
  ResultOutbox outbox([&] { ++wakes; });
  struct Reentrant : LogSink {
    ResultOutbox* outbox = nullptr;
    void OnLoadResult(const session::JobResult& r) override {
      LogSink::OnLoadResult(r);
      if (r.job_id == 1) outbox->OnLoadResult(Result(9));
      CHECK(outbox->Drain(*this) == 0);  // a nested drain leaves it to the outer one
    }
  } sink;
  sink.outbox = &outbox;
  outbox.OnLoadResult(Result(1));
  outbox.OnLoadResult(Result(2));
  CHECK(outbox.Drain(sink) == 3);
  CHECK(sink.log == std::vector<std::string>{"load 1", "load 2", "load 9"});
  CHECK(wakes == 1);  // the drain running picked job 9 up: no second wake
}

}  // namespace
}  // namespace kvpeer::daemon
