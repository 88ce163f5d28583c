// Engine ops (control-api.md section 2) and their error codes, each shown
// to leave no trace when refused.
#include <catch2/catch.hpp>

#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using namespace testing;

json::array HexKeys(std::initializer_list<const char*> keys) {
  json::array array;
  for (const char* key : keys) array.emplace_back(key);
  return array;
}

json::object Publish(json::array keys, json::array block_ids) {
  return {{"op", "publish"}, {"keys", std::move(keys)}, {"block_ids", std::move(block_ids)}};
}

json::object Load(int64_t job_id, json::array keys, json::array block_ids, const std::string& kv = "req-1",
                  const std::string& peer = "node-b:5710") {
  return {{"op", "load"},        {"job_id", job_id},        {"peer", peer},
          {"kv_request_id", kv}, {"keys", std::move(keys)}, {"block_ids", std::move(block_ids)}};
}

json::object Store(int64_t job_id, json::array keys, json::array block_ids, const std::string& kv = "req-s") {
  return {{"op", "store"},
          {"job_id", job_id},
          {"kv_request_id", kv},
          {"keys", std::move(keys)},
          {"block_ids", std::move(block_ids)}};
}

json::object Poll(int wait_ms = 0) { return {{"op", "poll"}, {"wait_ms", wait_ms}}; }

TEST_CASE("hello answers node_id, version and wire_version; a second hello is conflict") {
  Daemon daemon;
  Client client(daemon);
  json::object hello = client.Call(Hello());
  CHECK(hello.at("ok") == true);
  CHECK(hello.at("id") == 1);
  CHECK(hello.at("node_id") == "node-a:5710");
  CHECK(hello.at("wire_version") == "1.1");
  CHECK(hello.at("version").is_string());
  CHECK(ErrorCodeOf(client.Call(Hello())) == "conflict");
  json::object status = client.Call({{"op", "status"}});
  REQUIRE(status.at("engines").as_array().size() == 1);
  CHECK(status.at("engines").at(0).at("client") == "engine-1");
  CHECK(status.at("engines").at(0).at("pid") == ::getpid());
}

TEST_CASE("hello answers the node id set once the peer listener is bound") {
  Daemon daemon;
  daemon.registry().set_node_id("node-a:40123");
  Client client(daemon);
  CHECK(client.Call(Hello()).at("node_id") == "node-a:40123");
}

TEST_CASE("hello settings that differ from the node's are incompatible, naming the field") {
  Daemon daemon;
  Client first(daemon);
  REQUIRE(first.Call(Hello()).at("ok") == true);  // fixes fingerprint and seed
  Client second(daemon);
  json::object other = Hello("engine-2");
  SECTION("block_len (configured on the node)") {
    other["block_len"] = 128;
    json::object response = second.Call(other);
    CHECK(ErrorCodeOf(response) == "incompatible");
    CHECK_THAT(MessageOf(response), Catch::Contains("block_len"));
  }
  SECTION("config_fingerprint (taken from the first hello)") {
    other["config_fingerprint"] = "fp-2";
    CHECK_THAT(MessageOf(second.Call(other)), Catch::Contains("config_fingerprint"));
  }
  SECTION("hash_seed, whose value is never echoed") {
    other["hash_seed"] = "secret-seed";
    json::object response = second.Call(other);
    CHECK(ErrorCodeOf(response) == "incompatible");
    CHECK_THAT(MessageOf(response), !Catch::Contains("secret-seed"));
  }
  // Refused hellos open no session: engine ops still need a hello.
  CHECK(ErrorCodeOf(second.Call({{"op", "flush"}})) == "bad_request");
  CHECK(second.Call({{"op", "status"}}).at("engines").as_array().size() == 1);
}

TEST_CASE("hello with missing or mistyped fields is bad_request naming the field") {
  Daemon daemon;
  Client client(daemon);
  json::object hello = Hello();
  hello.erase("hash_seed");
  CHECK_THAT(MessageOf(client.Call(hello)), Catch::Contains("'hash_seed' is required"));
  hello = Hello();
  hello["block_len"] = "64";
  json::object response = client.Call(hello);
  CHECK(ErrorCodeOf(response) == "bad_request");
  CHECK_THAT(MessageOf(response), Catch::Contains("'block_len'") && Catch::Contains("a string"));
}

// They travel on the wire, whose rule forbids control characters: an
// engine's id with one would otherwise reach a peer that must refuse it as a
// violation, closing a connection every engine of the node shares.
TEST_CASE("kv_request_id and hash_seed with control characters are bad_request, and nothing is sent") {
  Daemon daemon;
  Client client(daemon);
  json::object hello = Hello();
  hello["hash_seed"] = "seed\n";
  json::object refused = client.Call(hello);
  CHECK(ErrorCodeOf(refused) == "bad_request");
  CHECK_THAT(MessageOf(refused), Catch::Contains("'hash_seed'") && Catch::Contains("character 5 is U+000A"));
  REQUIRE(client.Call(Hello()).at("ok") == true);
  for (const char* bad : {"req\x01",
                          "a\x1f"
                          "b",
                          "del\x7f", "tab\t"}) {
    INFO(bad);
    json::object response = client.Call({{"op", "lookup"},
                                         {"peer", "node-b:5710"},
                                         {"kv_request_id", bad},
                                         {"keys", HexKeys({"aa"})},
                                         {"flush", true}});
    CHECK(ErrorCodeOf(response) == "bad_request");
    CHECK_THAT(MessageOf(response), Catch::Contains("'kv_request_id'") && Catch::Contains("control characters"));
    CHECK(ErrorCodeOf(client.Call({{"op", "finish"}, {"kv_request_id", bad}})) == "bad_request");
  }
  CHECK(daemon.peers().lookups.empty());
}

TEST_CASE("register_region maps the file once; errors change nothing") {
  Daemon daemon;
  Client client(daemon);
  REQUIRE(client.Call(Hello()).at("ok") == true);
  ShmFile file(kNumBlocks * kBlockLen);
  ShmFile small(kNumBlocks * kBlockLen - 1);

  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa"}), {0}))) == "no_region");
  json::object too_small = client.Call({{"op", "register_region"}, {"path", small.path()}, {"num_blocks", kNumBlocks}});
  CHECK(ErrorCodeOf(too_small) == "bad_request");
  CHECK_THAT(MessageOf(too_small), Catch::Contains("511 bytes") && Catch::Contains("512"));
  CHECK(ErrorCodeOf(client.Call({{"op", "register_region"}, {"path", "/nonexistent/x"}, {"num_blocks", 1}})) ==
        "bad_request");
  CHECK(ErrorCodeOf(client.Call({{"op", "register_region"}, {"path", file.path()}})) == "bad_request");
  CHECK(ErrorCodeOf(client.Call({{"op", "register_region"}, {"path", file.path()}, {"num_blocks", -1}})) ==
        "bad_request");
  CHECK(ErrorCodeOf(client.Call({{"op", "register_region"}, {"path", file.path()}, {"num_blocks", 0}})) ==
        "bad_request");
  CHECK(ErrorCodeOf(client.Call({{"op", "register_region"}, {"fd", true}, {"num_blocks", 1}})) == "bad_request");
  CHECK(ErrorCodeOf(client.Call({{"op", "publish"}, {"keys", HexKeys({"aa"})}, {"block_ids", {0}}})) == "no_region");

  json::object ok = client.Call({{"op", "register_region"}, {"path", file.path()}, {"num_blocks", kNumBlocks}});
  CHECK(ok.at("ok") == true);
  CHECK(ok.at("bytes") == kNumBlocks * kBlockLen);
  CHECK(ok.at("region_id").is_number());
  json::object again = client.Call({{"op", "register_region"}, {"path", file.path()}, {"num_blocks", 1}});
  CHECK(ErrorCodeOf(again) == "conflict");
  CHECK(client.Call({{"op", "status"}}).at("engines").at(0).at("num_blocks") == kNumBlocks);
}

TEST_CASE("register_region with a descriptor passed by SCM_RIGHTS") {
  Daemon daemon;
  Client client(daemon);
  REQUIRE(client.Call(Hello()).at("ok") == true);
  UniqueFd memfd = MakeMemfd(4096 + kNumBlocks * kBlockLen);
  const std::string block(kBlockLen, 'm');
  REQUIRE(::pwrite(memfd.get(), block.data(), block.size(), 4096 + 2 * kBlockLen) == ssize_t(kBlockLen));
  client.SendWithFd(
      json::serialize(json::object{
          {"op", "register_region"}, {"fd", true}, {"num_blocks", kNumBlocks}, {"offset", 4096}, {"id", "r"}}) +
          "\n",
      memfd.get());
  json::object response = client.Response();
  REQUIRE(response.at("ok") == true);
  CHECK(response.at("id") == "r");
  memfd.Reset();  // the daemon's mapping does not depend on the engine's descriptor

  REQUIRE(client.Call(Publish(HexKeys({"abcd"}), {2})).at("published") == 1);
  session::PinRef pin = daemon.index().PinIfPublished(std::string("\xab\xcd", 2));
  REQUIRE(pin);
  CHECK(std::string(reinterpret_cast<const char*>(pin->bytes().data()), pin->bytes().size()) == block);
}

TEST_CASE("a descriptor sent with a line that does not use it is closed, not kept for later") {
  Daemon daemon;
  Client client(daemon);
  REQUIRE(client.Call(Hello()).at("ok") == true);
  UniqueFd memfd = MakeMemfd(kNumBlocks * kBlockLen);
  client.SendWithFd("{\"op\":\"status\"}\n", memfd.get());
  CHECK(client.Response().at("ok") == true);
  json::object response = client.Call({{"op", "register_region"}, {"fd", true}, {"num_blocks", kNumBlocks}});
  CHECK(ErrorCodeOf(response) == "bad_request");
  CHECK_THAT(MessageOf(response), Catch::Contains("no file descriptor"));
}

TEST_CASE("publish validates everything before publishing anything") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa", "bb"}), {1, kNumBlocks}))) == "out_of_range");
  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa", "BB"}), {1, 2}))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa", "abc"}), {1, 2}))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa", ""}), {1, 2}))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa", "bb"}), {1}))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa"}), {-1}))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Publish(HexKeys({"aa"}), {1.5}))) == "bad_request");
  json::object wrong_type = client.Call({{"op", "publish"}, {"keys", HexKeys({"aa"})}, {"block_ids", "1"}});
  CHECK_THAT(MessageOf(wrong_type), Catch::Contains("field 'block_ids' must be an array of integers"));
  json::object bad_key = client.Call(Publish(json::array{"aa", 7}, {1, 2}));
  CHECK_THAT(MessageOf(bad_key), Catch::Contains("'keys[1]'"));
  CHECK(daemon.index().size() == 0);

  json::object ok = client.Call(Publish(HexKeys({"aa", "bb"}), {1, 2}));
  CHECK(ok.at("published") == 2);
  CHECK(daemon.index().size() == 2);
  CHECK(client.Call({{"op", "status"}}).at("engines").at(0).at("published") == 2);
}

TEST_CASE("unpublish answers released and pinned; pinned slots come back through poll") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  REQUIRE(client.Call(Publish(HexKeys({"aa", "bb"}), {1, 2})).at("ok") == true);
  session::PinRef pin = daemon.index().PinIfPublished(std::string("\xbb", 1));  // a peer reading slot 2
  json::object response = client.Call({{"op", "unpublish"}, {"keys", HexKeys({"aa", "bb", "cc"})}});
  CHECK(response.at("released") == json::array{1});
  CHECK(response.at("pinned") == json::array{2});
  CHECK(client.Call(Poll()).at("released").as_array().empty());
  pin.reset();
  json::object poll = client.Call(Poll());
  CHECK(poll.at("released") == json::array{2});
  CHECK(poll.at("results").as_array().empty());
  CHECK(poll.at("failed_requests").as_array().empty());
}

TEST_CASE("lookup answers hit, miss or retry per key") {
  Daemon daemon;
  Client client(daemon);
  REQUIRE(client.Call(Hello()).at("ok") == true);  // lookup needs no region
  daemon.peers().answer_for[std::string("\xaa", 1)] = session::ProbeAnswer::kHit;
  daemon.peers().answer_for[std::string("\xbb", 1)] = session::ProbeAnswer::kMiss;
  json::object response = client.Call({{"op", "lookup"},
                                       {"peer", "node-b:5710"},
                                       {"kv_request_id", "req-1"},
                                       {"keys", HexKeys({"aa", "bb", "cc"})},
                                       {"flush", true}});
  CHECK(response.at("results") == json::array{"hit", "miss", "retry"});
  REQUIRE(daemon.peers().lookups.size() == 1);
  CHECK(daemon.peers().lookups[0].flush);

  CHECK(ErrorCodeOf(client.Call(
            {{"op", "lookup"}, {"peer", "node-b:5710"}, {"kv_request_id", ""}, {"keys", HexKeys({"aa"})}})) ==
        "bad_request");
  CHECK(ErrorCodeOf(client.Call({{"op", "lookup"},
                                 {"peer", "node-b:5710"},
                                 {"kv_request_id", "r"},
                                 {"keys", HexKeys({"aa"})},
                                 {"flush", 1}})) == "bad_request");
  daemon.peers().lookup_status = Status::Unavailable("backing off");
  CHECK(ErrorCodeOf(client.Call(
            {{"op", "lookup"}, {"peer", "node-c:5710"}, {"kv_request_id", "req-2"}, {"keys", HexKeys({"aa"})}})) ==
        "peer_unavailable");
  CHECK(daemon.peers().lookups.size() == 2);
  CHECK(client.Call({{"op", "flush"}}).at("sent") == 1);
}

TEST_CASE("load: conflicts and range errors are refused before the peer side sees anything") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  REQUIRE(client.Call(Load(1, HexKeys({"aa", "bb"}), {0, 1})).at("ok") == true);
  REQUIRE(daemon.peers().loads.size() == 1);
  CHECK(daemon.peers().loads[0].block_ids == std::vector<protocol::SlotIndex>{0, 1});
  CHECK(daemon.peers().loads[0].keys == std::vector<protocol::Key>{"\xaa", "\xbb"});

  CHECK(ErrorCodeOf(client.Call(Load(1, HexKeys({"cc"}), {5}))) == "conflict");  // job_id in use
  json::object overlap = client.Call(Load(2, HexKeys({"cc", "dd"}), {5, 1}));
  CHECK(ErrorCodeOf(overlap) == "conflict");
  CHECK_THAT(MessageOf(overlap), Catch::Contains("block id 1"));
  CHECK(ErrorCodeOf(client.Call(Load(2, HexKeys({"cc"}), {kNumBlocks}))) == "out_of_range");
  CHECK(ErrorCodeOf(client.Call(Load(2, HexKeys({"cc", "dd"}), {4, 4}))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Load(2, HexKeys({}), {}))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Load(2, HexKeys({"cc"}), {4}, "req-1", "bad peer"))) == "bad_request");
  json::object no_job = Load(2, HexKeys({"cc"}), {4});
  no_job.erase("job_id");
  CHECK(ErrorCodeOf(client.Call(no_job)) == "bad_request");
  CHECK(daemon.peers().loads.size() == 1);

  // Another engine may not use req-1 towards the same peer, but may towards another.
  Engine other(daemon, "engine-2");
  CHECK(ErrorCodeOf(other.client.Call(Load(1, HexKeys({"cc"}), {0}))) == "conflict");
  CHECK(other.client.Call(Load(1, HexKeys({"cc"}), {0}, "req-1", "node-c:5710")).at("ok") == true);

  // The peer side's refusal is passed on and leaves no job behind.
  daemon.peers().load_status = Status::Invalid("key 'cc' is not a confirmed hit");
  CHECK(ErrorCodeOf(client.Call(Load(2, HexKeys({"cc"}), {4}))) == "bad_request");
  daemon.peers().load_status = Status::Ok();
  CHECK(client.Call(Load(2, HexKeys({"cc"}), {4})).at("ok") == true);
  CHECK(client.Call({{"op", "status"}}).at("engines").at(0).at("loads_in_flight") == 2);
}

// Issue 11, finding 5: a load into a slot that a peer's round had pinned was
// accepted, so the peer was then served the new bytes under the old key.
// The pin is taken the way the server role takes it for a peer's lookup hit
// (NodePublishedBlocks::PinIfPublished on the real index).
TEST_CASE("load into a slot pinned by a peer's round is conflict until the released event") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  REQUIRE(client.Call(Publish(HexKeys({"aa"}), {3})).at("ok") == true);
  session::PinRef round = daemon.index().PinIfPublished(std::string("\xaa", 1));  // a peer looked "aa" up
  REQUIRE(round != nullptr);

  json::object refused = client.Call(Load(1, HexKeys({"bb", "cc"}), {2, 3}));
  CHECK(ErrorCodeOf(refused) == "conflict");
  CHECK_THAT(MessageOf(refused), Catch::Contains("block id 3 is pinned") && Catch::Contains("released"));
  CHECK(daemon.peers().loads.empty());
  // The docs' order: range and duplicate slots are reported before the pin.
  CHECK(ErrorCodeOf(client.Call(Load(1, HexKeys({"bb", "cc"}), {3, kNumBlocks}))) == "out_of_range");
  CHECK(ErrorCodeOf(client.Call(Load(1, HexKeys({"bb", "cc"}), {3, 3}))) == "bad_request");

  // Unpublishing does not free a pinned slot either: it is answered pinned.
  CHECK(client.Call({{"op", "unpublish"}, {"keys", HexKeys({"aa"})}}).at("pinned") == json::array{3});
  CHECK(ErrorCodeOf(client.Call(Load(1, HexKeys({"bb"}), {3}))) == "conflict");

  round.reset();  // the round ends: fetched, finished or retired at --round-timeout-s
  CHECK(client.Call(Poll()).at("released") == json::array{3});
  CHECK(client.Call(Load(1, HexKeys({"bb", "cc"}), {2, 3})).at("ok") == true);
  REQUIRE(daemon.peers().loads.size() == 1);
  CHECK(daemon.peers().loads[0].block_ids == std::vector<protocol::SlotIndex>{2, 3});
}

TEST_CASE("load into a slot of a store job without its result is conflict") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  REQUIRE(client.Call(Store(1, HexKeys({"aa"}), {4})).at("ok") == true);
  json::object refused = client.Call(Load(2, HexKeys({"bb"}), {4}));
  CHECK(ErrorCodeOf(refused) == "conflict");
  CHECK_THAT(MessageOf(refused), Catch::Contains("block id 4 is pinned") && Catch::Contains("store"));
  CHECK(daemon.peers().loads.empty());

  FakePeers::StoreCall& store = daemon.peers().stores.at(0);
  daemon.registry().OnStoreResult({store.job, "req-s", true, ""});
  store.pins.clear();  // the last frame reading slot 4 is written
  REQUIRE(client.Call(Poll()).at("results").at(0).at("job_id") == 1);
  CHECK(client.Call(Load(2, HexKeys({"bb"}), {4})).at("ok") == true);
}

TEST_CASE("load into unpinned slots is accepted, published or not, whatever other engines pin") {
  Daemon daemon;
  Engine engine(daemon);
  Engine other(daemon, "engine-2");
  REQUIRE(engine.client.Call(Publish(HexKeys({"aa"}), {5})).at("ok") == true);
  REQUIRE(other.client.Call(Publish(HexKeys({"bb"}), {6})).at("ok") == true);
  session::PinRef round = daemon.index().PinIfPublished(std::string("\xbb", 1));  // the other engine's slot 6
  REQUIRE(round != nullptr);
  CHECK(engine.client.Call(Load(1, HexKeys({"cc", "dd", "ee"}), {4, 5, 6})).at("ok") == true);
  CHECK(ErrorCodeOf(other.client.Call(Load(1, HexKeys({"cc"}), {6}, "req-2"))) == "conflict");
}

TEST_CASE("load results are polled once; the job id and the slots are free again after") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  REQUIRE(client.Call(Load(7, HexKeys({"aa"}), {3})).at("ok") == true);
  // The peer side writes the slot through the sink; the engine sees it.
  std::memset(daemon.peers().loads[0].sink->Slot(3).data(), 'L', kBlockLen);
  CHECK(engine.region.Read(3 * kBlockLen, kBlockLen) == std::string(kBlockLen, 'L'));
  daemon.peers().EndLoad(0, true);

  CHECK(ErrorCodeOf(client.Call(Load(7, HexKeys({"bb"}), {4}))) == "conflict");  // not delivered yet
  CHECK(client.Call(Load(8, HexKeys({"bb"}), {3})).at("ok") == true);            // slot 3 is free
  json::object poll = client.Call(Poll());
  REQUIRE(poll.at("results").as_array().size() == 1);
  json::object result = poll.at("results").at(0).as_object();
  CHECK(result.at("job_id") == 7);
  CHECK(result.at("kv_request_id") == "req-1");
  CHECK(result.at("success") == true);
  CHECK_FALSE(result.contains("reason"));
  CHECK(client.Call(Poll()).at("results").as_array().empty());  // exactly once
  CHECK(client.Call(Load(7, HexKeys({"cc"}), {5})).at("ok") == true);

  daemon.peers().EndLoad(0, false, "transfer_done success=false");
  json::object failed = client.Call(Poll()).at("results").at(0).as_object();
  CHECK(failed.at("job_id") == 8);
  CHECK(failed.at("success") == false);
  CHECK(failed.at("reason") == "transfer_done success=false");
}

TEST_CASE("poll wait_ms is checked and a long poll wakes when a result arrives") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  CHECK(ErrorCodeOf(client.Call(Poll(60001))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call(Poll(-1))) == "bad_request");
  CHECK(ErrorCodeOf(client.Call({{"op", "poll"}, {"wait_ms", "5"}})) == "bad_request");

  REQUIRE(client.Call(Load(1, HexKeys({"aa"}), {0})).at("ok") == true);
  const auto start = std::chrono::steady_clock::now();
  client.Send(json::serialize(json::object{{"op", "poll"}, {"wait_ms", 30000}, {"id", "p"}}) + "\n");
  client.Send("{\"op\":\"status\",\"id\":\"s\"}\n");
  CHECK_FALSE(client.ReadLine(std::chrono::milliseconds(100)));  // waiting, and status waits behind it
  daemon.peers().EndLoad(0, true);
  json::object poll = client.Response();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(poll.at("id") == "p");
  CHECK(poll.at("results").at(0).at("job_id") == 1);
  CHECK(client.Response().at("id") == "s");  // responses in request order
}

TEST_CASE("a long poll with nothing to report returns empty after wait_ms") {
  Daemon daemon;
  Engine engine(daemon);
  const auto start = std::chrono::steady_clock::now();
  json::object poll = engine.client.Call(Poll(150));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(150));
  CHECK(poll.at("results").as_array().empty());
  CHECK(poll.at("released").as_array().empty());
}

TEST_CASE("failed requests are reported to the engine using them") {
  Daemon daemon;
  Engine engine(daemon);
  REQUIRE(engine.client.Call(Load(1, HexKeys({"aa"}), {0})).at("ok") == true);
  daemon.registry().OnRequestFailed("node-b:5710", "req-1");
  daemon.registry().OnRequestFailed("node-b:5710", "req-1");
  daemon.registry().OnRequestFailed("node-b:5710", "someone-else");
  CHECK(engine.client.Call(Poll()).at("failed_requests") == json::array{"req-1"});
}

TEST_CASE("store: the result waits until every pin of the job has dropped") {
  Daemon daemon;
  Engine engine(daemon);
  Client& client = engine.client;
  engine.region.Write(2 * kBlockLen, std::string(kBlockLen, 's'));
  CHECK(ErrorCodeOf(client.Call(Store(1, HexKeys({"aa"}), {kNumBlocks}))) == "out_of_range");
  REQUIRE(client.Call(Store(1, HexKeys({"aa", "bb"}), {2, 3})).at("ok") == true);
  CHECK(ErrorCodeOf(client.Call(Store(1, HexKeys({"cc"}), {4}))) == "conflict");
  REQUIRE(daemon.peers().stores.size() == 1);
  FakePeers::StoreCall& store = daemon.peers().stores[0];
  REQUIRE(store.pins.size() == 2);
  CHECK(std::string(reinterpret_cast<const char*>(store.pins[0]->bytes().data()), kBlockLen) ==
        std::string(kBlockLen, 's'));

  daemon.registry().OnStoreResult({store.job, "req-s", true, ""});
  CHECK(client.Call(Poll()).at("results").as_array().empty());  // a frame may still read slot 3
  store.pins[0].reset();
  CHECK(client.Call(Poll()).at("results").as_array().empty());
  store.pins[1].reset();
  json::object poll = client.Call(Poll());
  REQUIRE(poll.at("results").as_array().size() == 1);
  CHECK(poll.at("results").at(0).at("job_id") == 1);
  CHECK(poll.at("results").at(0).at("success") == true);
}

TEST_CASE("store: pins dropped before the result is reported deliver with the result") {
  Daemon daemon;
  Engine engine(daemon);
  REQUIRE(engine.client.Call(Store(5, HexKeys({"aa"}), {1})).at("ok") == true);
  const session::JobId job = daemon.peers().stores[0].job;
  daemon.peers().stores.clear();  // the peer side dropped the pins
  CHECK(engine.client.Call(Poll()).at("results").as_array().empty());
  daemon.registry().OnStoreResult({job, "req-s", false, "unmatched supply"});
  json::object result = engine.client.Call(Poll()).at("results").at(0).as_object();
  CHECK(result.at("job_id") == 5);
  CHECK(result.at("reason") == "unmatched supply");
}

TEST_CASE("finish reaches the peer side and frees the request id for other engines") {
  Daemon daemon;
  Engine engine(daemon);
  REQUIRE(engine.client.Call(Load(1, HexKeys({"aa"}), {0})).at("ok") == true);
  Engine other(daemon, "engine-2");
  CHECK(ErrorCodeOf(other.client.Call(Load(1, HexKeys({"aa"}), {0}))) == "conflict");
  CHECK(ErrorCodeOf(engine.client.Call({{"op", "finish"}})) == "bad_request");
  REQUIRE(engine.client.Call({{"op", "finish"}, {"kv_request_id", "req-1"}}).at("ok") == true);
  CHECK(daemon.peers().finished == std::vector<std::string>{"req-1"});
  json::object result = engine.client.Call(Poll()).at("results").at(0).as_object();
  CHECK(result.at("success") == false);
  CHECK(other.client.Call(Load(1, HexKeys({"aa"}), {0})).at("ok") == true);
}

}  // namespace
}  // namespace kvpeer::daemon
