// PeerResolver with an injected blocking lookup: names starting "slow"
// block until the test releases them (a DNS server that answers late),
// others answer at once. What is asserted is what docs/security.md, "Name
// resolution", promises: IP literals never reach the pool, a slow name
// delays no other, each caller times out on its own, a caller that gives
// up is never called back, lookups of one name are shared, answers and
// failures are cached briefly, and every table is bounded.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "daemon/peer/peer_resolver.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// The fake DNS: counts the lookups of each name; "slow*" names wait for
// Release. Shared with the pool threads, which may outlive a test case.
struct FakeDns {
  std::mutex mutex;
  std::condition_variable released_cv;
  bool released = false;
  std::map<std::string, int> asked;

  HostAddresses Look(const std::string& host) {
    std::unique_lock lock(mutex);
    ++asked[host];
    if (host.starts_with("slow")) released_cv.wait(lock, [this] { return released; });
    HostAddresses answer;
    if (host.starts_with("missing")) {
      answer.failure = ResolveFailure::kNotFound;
      answer.detail = "Name or service not known";
    } else {
      for (int i = 1; i <= 20; ++i) answer.addresses.push_back(asio::ip::make_address("10.0.0." + std::to_string(i)));
    }
    return answer;
  }
  void Release() {
    std::lock_guard lock(mutex);
    released = true;
    released_cv.notify_all();
  }
  int Asked(const std::string& host) {
    std::lock_guard lock(mutex);
    return asked[host];
  }
};

struct Fixture {
  asio::io_context io;
  std::shared_ptr<FakeDns> dns = std::make_shared<FakeDns>();
  PeerResolver::Options options;
  std::optional<PeerResolver> resolver;

  explicit Fixture(std::chrono::milliseconds timeout = 300ms) {
    options.timeout = timeout;
    options.lookup = [dns = dns](const std::string& host) { return dns->Look(host); };
  }
  ~Fixture() {
    resolver.reset();
    dns->Release();  // the detached pool threads end
  }
  PeerResolver& Make() {
    resolver.emplace(io.get_executor(), options);
    return *resolver;
  }
  template <typename Pred>
  bool RunUntil(Pred done, std::chrono::milliseconds limit = 3000ms) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_for(5ms);
    }
    return done();
  }
};

// One caller's outcome and when it came.
struct Answer {
  std::optional<ResolvedEndpoints> outcome;
  std::chrono::steady_clock::time_point at;
  PeerResolver::Done Callback() {
    return [this](ResolvedEndpoints o) {
      outcome = std::move(o);
      at = std::chrono::steady_clock::now();
    };
  }
};

TEST_CASE("an IP literal is answered on the next turn, never by the pool", "[peer_resolver]") {
  Fixture f;
  PeerResolver& resolver = f.Make();
  Answer v4, v6;
  auto a = resolver.Resolve("127.0.0.1", 5710, v4.Callback());
  auto b = resolver.Resolve("::1", 5711, v6.Callback());
  CHECK_FALSE(v4.outcome);  // not from within Resolve
  f.io.restart();
  f.io.poll();
  REQUIRE(v4.outcome);
  REQUIRE(v6.outcome);
  CHECK(v4.outcome->ok());
  REQUIRE(v4.outcome->value().size() == 1);
  CHECK(v4.outcome->value()[0] == asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 5710));
  CHECK(v6.outcome->value()[0] == asio::ip::tcp::endpoint(asio::ip::make_address("::1"), 5711));
  CHECK(f.dns->asked.empty());
  CHECK(resolver.in_flight() == 0);
}

TEST_CASE("slow names delay neither a literal nor another name, and time out on their own", "[peer_resolver]") {
  Fixture f(400ms);
  PeerResolver& resolver = f.Make();
  const auto start = std::chrono::steady_clock::now();
  Answer slow1, slow2, fast, literal;
  auto a = resolver.Resolve("slow-one.test", 5710, slow1.Callback());
  auto b = resolver.Resolve("slow-two.test", 5710, slow2.Callback());
  auto c = resolver.Resolve("fast.test", 5710, fast.Callback());
  auto d = resolver.Resolve("10.1.2.3", 5710, literal.Callback());
  REQUIRE(f.RunUntil([&] { return fast.outcome && literal.outcome; }));
  CHECK(fast.at - start < 200ms);
  CHECK(literal.at - start < 200ms);
  CHECK(fast.outcome->ok());
  CHECK_FALSE(slow1.outcome);

  REQUIRE(f.RunUntil([&] { return slow1.outcome && slow2.outcome; }));
  for (Answer* slow : {&slow1, &slow2}) {
    CHECK(slow->outcome->status().code() == Status::Code::kUnavailable);
    CHECK(slow->at - start >= 400ms);
    CHECK(slow->at - start < 1000ms);
  }
  CHECK(slow1.outcome->status().message() == "name resolution of slow-one.test timed out after 400 ms");
  CHECK(resolver.waiting() == 0);
  CHECK(resolver.in_flight() == 2);  // the threads are still asking; their answers will fill the cache
}

TEST_CASE("a caller that gives up is never called back and keeps nothing alive", "[peer_resolver]") {
  Fixture f(200ms);
  PeerResolver& resolver = f.Make();
  auto kept = std::make_shared<int>(7);
  bool called = false;
  auto handle = resolver.Resolve("slow.test", 1, [kept, &called](ResolvedEndpoints) { called = true; });
  bool literal_called = false;
  auto literal = resolver.Resolve("10.0.0.1", 1, [kept, &literal_called](ResolvedEndpoints) { literal_called = true; });
  REQUIRE(kept.use_count() == 3);
  handle.reset();
  literal.reset();
  CHECK(kept.use_count() == 1);  // the callbacks' captures went with the handles
  CHECK(resolver.waiting() == 0);
  f.dns->Release();
  f.RunUntil([&] { return resolver.in_flight() == 0; });
  f.RunUntil([] { return false; }, 300ms);  // past the timeout too
  CHECK_FALSE(called);
  CHECK_FALSE(literal_called);
}

TEST_CASE("callers of one name share one lookup, and its answer is cached", "[peer_resolver]") {
  Fixture f(2000ms);
  PeerResolver& resolver = f.Make();
  std::vector<Answer> answers(5);
  std::vector<std::unique_ptr<PeerResolver::Lookup>> handles;
  for (Answer& answer : answers) handles.push_back(resolver.Resolve("slow-shared.test", 5710, answer.Callback()));
  REQUIRE(f.RunUntil([&] { return f.dns->Asked("slow-shared.test") == 1; }));
  CHECK(resolver.in_flight() == 1);
  CHECK(resolver.waiting() == 5);
  f.dns->Release();
  REQUIRE(f.RunUntil([&] {
    for (const Answer& answer : answers)
      if (!answer.outcome) return false;
    return true;
  }));
  for (const Answer& answer : answers) {
    CHECK(answer.outcome->ok());
    CHECK(answer.outcome->value().size() == f.options.max_addresses);  // 20 found, 16 kept
  }
  CHECK(f.dns->Asked("slow-shared.test") == 1);

  Answer again;
  auto handle = resolver.Resolve("slow-shared.test", 6000, again.Callback());
  REQUIRE(f.RunUntil([&] { return again.outcome.has_value(); }));
  CHECK(again.outcome->value().front().port() == 6000);
  CHECK(f.dns->Asked("slow-shared.test") == 1);  // from the cache
}

TEST_CASE("answers expire after the ttl, failures after the shorter negative ttl", "[peer_resolver]") {
  Fixture f;
  f.options.ttl = 400ms;
  f.options.negative_ttl = 100ms;
  PeerResolver& resolver = f.Make();
  auto ask = [&](const std::string& host) {
    Answer answer;
    auto handle = resolver.Resolve(host, 1, answer.Callback());
    REQUIRE(f.RunUntil([&] { return answer.outcome.has_value(); }));
    return *answer.outcome;
  };
  const ResolvedEndpoints missing = ask("missing.test");
  CHECK(missing.status().code() == Status::Code::kNotFound);
  CHECK(missing.status().message() == "name resolution of missing.test failed: Name or service not known");
  CHECK(ask("found.test").ok());
  CHECK_FALSE(ask("missing.test").ok());
  CHECK(ask("found.test").ok());
  CHECK(f.dns->Asked("missing.test") == 1);
  CHECK(f.dns->Asked("found.test") == 1);
  f.RunUntil([] { return false; }, 150ms);
  CHECK_FALSE(ask("missing.test").ok());
  CHECK(ask("found.test").ok());
  CHECK(f.dns->Asked("missing.test") == 2);  // the failure expired
  CHECK(f.dns->Asked("found.test") == 1);    // the answer did not yet
  f.RunUntil([] { return false; }, 300ms);
  CHECK(ask("found.test").ok());
  CHECK(f.dns->Asked("found.test") == 2);
}

TEST_CASE("every table is bounded", "[peer_resolver]") {
  Fixture f(5000ms);
  f.options.max_cached = 8;
  f.options.max_in_flight = 3;
  f.options.max_waiting = 5;
  PeerResolver& resolver = f.Make();

  SECTION("the cache keeps at most max_cached names") {
    for (int i = 0; i < 50; ++i) {
      Answer answer;
      auto handle = resolver.Resolve("name" + std::to_string(i) + ".test", 1, answer.Callback());
      REQUIRE(f.RunUntil([&] { return answer.outcome.has_value(); }));
      CHECK(resolver.cached() <= 8);
    }
    CHECK(resolver.cached() == 8);
  }
  SECTION("names in flight and callers waiting") {
    std::vector<Answer> answers(8);
    std::vector<std::unique_ptr<PeerResolver::Lookup>> handles;
    for (int i = 0; i < 4; ++i)
      handles.push_back(resolver.Resolve("slow" + std::to_string(i) + ".test", 1, answers[i].Callback()));
    REQUIRE(f.RunUntil([&] { return answers[3].outcome.has_value(); }));
    CHECK(answers[3].outcome->status().code() == Status::Code::kConflict);
    CHECK(answers[3].outcome->status().message() ==
          "name resolution of slow3.test refused: the resolver is busy (3 names being looked up, 3 callers waiting)");
    CHECK(resolver.in_flight() == 3);
    // A name already in flight may still be joined, up to max_waiting callers.
    for (int i = 4; i < 7; ++i) handles.push_back(resolver.Resolve("slow0.test", 1, answers[i].Callback()));
    REQUIRE(f.RunUntil([&] { return answers[6].outcome.has_value(); }));
    CHECK(answers[6].outcome->status().code() == Status::Code::kConflict);
    CHECK_FALSE(answers[4].outcome);
    CHECK(resolver.waiting() == 5);
    // Literals never wait, however busy the pool is.
    handles.push_back(resolver.Resolve("192.0.2.9", 1, answers[7].Callback()));
    REQUIRE(f.RunUntil([&] { return answers[7].outcome.has_value(); }));
    CHECK(answers[7].outcome->ok());
  }
  SECTION("a name longer than DNS allows is refused before any lookup") {
    Answer answer;
    auto handle = resolver.Resolve(std::string(300, 'a'), 1, answer.Callback());
    REQUIRE(f.RunUntil([&] { return answer.outcome.has_value(); }));
    CHECK(answer.outcome->status().code() == Status::Code::kInvalid);
    CHECK(answer.outcome->status().message().find("has 1 to 253 characters, this one has 300") != std::string::npos);
    CHECK(f.dns->asked.empty());
  }
}

TEST_CASE("destroying the resolver does not wait for a lookup still running", "[peer_resolver]") {
  Fixture f(5000ms);
  PeerResolver& resolver = f.Make();
  Answer answer;
  auto handle = resolver.Resolve("slow-forever.test", 1, answer.Callback());
  REQUIRE(f.RunUntil([&] { return f.dns->Asked("slow-forever.test") == 1; }));
  const auto start = std::chrono::steady_clock::now();
  f.resolver.reset();
  CHECK(std::chrono::steady_clock::now() - start < 100ms);
  handle.reset();  // after the resolver: harmless
  f.dns->Release();
  f.RunUntil([] { return false; }, 100ms);  // the late answer is posted and dropped
  CHECK_FALSE(answer.outcome);
}

TEST_CASE("getaddrinfo: localhost from the hosts file, a literal as itself", "[peer_resolver]") {
  const HostAddresses local = LookUpHost("localhost");
  REQUIRE_FALSE(local.failure);
  CHECK_FALSE(local.addresses.empty());
  const HostAddresses literal = LookUpHost("127.0.0.1");
  REQUIRE(literal.addresses.size() == 1);
  CHECK(literal.addresses[0] == asio::ip::make_address("127.0.0.1"));
}

}  // namespace
}  // namespace kvpeer::daemon
