// The round bounds of wire-protocol.md 1.1 section 6: every round a peer
// opens on the server role ends even if the peer goes quiet (the round
// timeout for lookup-only rounds, the unsupplied timeout for
// disaggregated fetches), the keys of a connection's open rounds are
// bounded in bytes (ServerConfig::max_round_key_bytes), and no frame either
// role sends exceeds the header limit (frame_budget.h).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "protocol/codec.h"
#include "protocol/limits.h"
#include "session/internal/frame_budget.h"
#include "tests/session/client_fixture.h"
#include "tests/session/server_harness.h"

namespace kvpeer::session::testing {
namespace {

using protocol::BlockData;
using protocol::LookupResp;
using protocol::TransferDone;
using server_test::Done;
using server_test::ServerHarness;

ServerConfig WithKeyBytes(uint64_t bytes) {
  ServerConfig config = server_test::DefaultServerConfig();
  config.max_round_key_bytes = bytes;
  return config;
}

uint64_t Charge(size_t keys, size_t key_len) { return keys * (key_len + kRoundKeyOverhead); }

TEST_CASE("round timeout: a lookup-only round with pinned hits is retired and its pins released", "[server][rounds]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 4);
  REQUIRE(h.region->total_live_pins() == 2);
  REQUIRE(h.role->NextDeadline() == h.clock.now() + std::chrono::seconds(30));

  h.clock.Advance(std::chrono::seconds(29));
  h.role->OnTick();
  CHECK(h.region->total_live_pins() == 2);
  CHECK(h.role->TakeRoundEvents().empty());

  h.clock.Advance(std::chrono::seconds(1));
  h.role->OnTick();
  CHECK(h.region->total_live_pins() == 0);
  CHECK(h.role->RoundsOpen() == 0);
  CHECK(h.role->TrackedRequests() == 0);
  CHECK(h.role->RoundKeyBytes() == 0);
  CHECK(h.role->TakeRoundEvents().lookup_rounds_expired == 1);
  CHECK(h.log.frames.size() == 1);  // the lookup_resp only: a retired lookup round owes no frame
  CHECK_FALSE(h.role->NextDeadline().has_value());

  // A late fetch of the retired round finds no pins: it is served as a
  // disaggregated round, whose supply never comes, so it fails by the
  // unsupplied timeout rather than hanging.
  REQUIRE(h.Fetch("a", {1}, {0}, 4).ok());
  h.clock.Advance(std::chrono::seconds(60));
  h.role->OnTick();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", false, 4));
}

TEST_CASE("round timeout: a fetched round is not cut short however long it sends", "[server][rounds]") {
  ServerHarness h;
  h.Publish({1, 2});
  h.Lookup("a", {1, 2}, 0);
  h.clock.Advance(std::chrono::seconds(20));
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.clock.Advance(std::chrono::seconds(300));
  h.role->OnTick();
  CHECK(h.role->TakeRoundEvents().empty());
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
  CHECK(h.region->total_live_pins() == 0);
}

TEST_CASE("unsupplied timeout: a disaggregated fetch still waiting for supply gets transfer_done false",
          "[server][rounds]") {
  ServerConfig config = server_test::DefaultServerConfig();
  config.unsupplied_timeout = std::chrono::seconds(5);
  ServerHarness h(config);
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 9).ok());
  h.Store(1, "a", {1});  // half of the demand arrives
  h.Drain();
  REQUIRE(h.log.Count<BlockData>() == 1);
  h.clock.Advance(std::chrono::seconds(5));
  REQUIRE(h.role->NextDeadline() <= h.clock.now());
  h.role->OnTick();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", false, 9));
  CHECK(h.role->TakeRoundEvents().fetches_unsupplied == 1);
  CHECK(h.role->RoundsOpen() == 0);
  CHECK(h.role->RoundKeyBytes() == 0);
  const auto results = h.Results();
  REQUIRE(results.size() == 1);  // job 1 had every block it gave sent
  CHECK(results[0].success);
  CHECK(h.region->total_live_pins() == 0);
}

TEST_CASE("unsupplied timeout: a fully supplied round keeps sending", "[server][rounds]") {
  ServerConfig config = server_test::DefaultServerConfig();
  config.unsupplied_timeout = std::chrono::seconds(5);
  ServerHarness h(config);
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Store(1, "a", {1, 2});
  CHECK_FALSE(h.role->NextDeadline().has_value());
  h.clock.Advance(std::chrono::seconds(50));
  h.role->OnTick();
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
}

TEST_CASE("key bytes: a lookup beyond the bound answers all-miss, pins nothing, is counted", "[server][rounds]") {
  const size_t key_len = server_test::Key(1).size();
  ServerHarness h(WithKeyBytes(Charge(3, key_len)));
  h.Publish({1, 2, 3, 4});
  h.Lookup("a", {1, 2}, 0);
  CHECK(h.role->RoundKeyBytes() == Charge(2, key_len));
  h.Lookup("b", {3, 4}, 1);  // 4 keys > 3: refused
  const LookupResp refused = h.All<LookupResp>().at(1);
  CHECK(refused.hits == std::vector<bool>{false, false});
  CHECK(h.region->live_pins(3) == 0);
  CHECK(h.role->TakeRoundEvents().lookups_over_key_bytes == 1);
  CHECK(h.role->RoundKeyBytes() == Charge(2, key_len));
  // The open round is served as usual, and its end gives the bytes back.
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", true, 0));
  CHECK(h.role->RoundKeyBytes() == 0);
  h.Lookup("b", {3, 4}, 1);
  CHECK(h.All<LookupResp>().back().hits == std::vector<bool>{true, true});
}

TEST_CASE("key bytes: a disaggregated fetch beyond the bound gets transfer_done false", "[server][rounds]") {
  const size_t key_len = server_test::Key(1).size();
  ServerHarness h(WithKeyBytes(Charge(3, key_len)));
  REQUIRE(h.Fetch("a", {1, 2}, {0, 1}, 0).ok());
  REQUIRE(h.Fetch("a", {3, 4}, {2, 3}, 1).ok());  // refused, not a violation
  REQUIRE(Done(h.All<TransferDone>().at(0), "a", false, 1));
  CHECK(h.role->TakeRoundEvents().fetches_over_key_bytes == 1);
  CHECK(h.role->RoundsOpen() == 1);
  h.Store(1, "a", {1, 2});
  h.Drain();
  REQUIRE(Done(h.All<TransferDone>().at(1), "a", true, 0));
  CHECK(h.role->RoundKeyBytes() == 0);
}

TEST_CASE("key bytes: every way a round ends gives its bytes back", "[server][rounds]") {
  ServerHarness h;
  h.Publish({1, 2, 3});
  h.Lookup("a", {1}, 0);
  h.Lookup("b", {2}, 1);
  h.Lookup("c", {3}, 2);
  REQUIRE(h.Fetch("d", {5}, {0}, 3).ok());
  CHECK(h.role->RoundKeyBytes() > 0);
  REQUIRE(h.TerminalFetch("a", 0).ok());
  h.Abort("b", 1);
  REQUIRE(h.Fetch("c", {3}, {0}, 2).ok());
  h.Drain();
  h.Abort("d", 3);
  CHECK(h.role->RoundKeyBytes() == 0);
  CHECK(h.role->RoundsOpen() == 0);
}

TEST_CASE("lookup_resp of a lookup near the header limit is split by round, one answer a key", "[server][rounds]") {
  ServerConfig config = server_test::DefaultServerConfig();
  config.max_round_key_bytes = 0;
  ServerHarness h(config);
  // 2040 keys of 4096 bytes: the lookup fits one frame, hits push the answer over.
  std::vector<protocol::Key> keys;
  for (int i = 0; i < 2040; ++i) keys.push_back(std::string(4096, static_cast<char>('a' + i % 26)) + std::to_string(i));
  for (auto& key : keys) key.resize(4096);
  h.role->OnLookup(protocol::Lookup{"a", keys, 3});
  const auto parts = h.All<LookupResp>();
  size_t answered = 0;
  for (const auto& part : parts) {
    CHECK(part.round_seq == 3);
    CHECK(part.keys.size() == part.hits.size());
    CHECK(protocol::EncodeHeader(protocol::Message(part)).size() <= protocol::kMaxHeaderLen);
    answered += part.keys.size();
  }
  CHECK(answered == keys.size());
}

TEST_CASE("client: a probe of many long keys is split into lookups that each fit one frame", "[client][rounds]") {
  ClientFixture f;
  std::vector<protocol::Key> keys;
  for (int i = 0; i < 5000; ++i) {
    protocol::Key key(4096, '\0');
    const std::string id = std::to_string(i);
    std::copy(id.begin(), id.end(), key.begin());
    keys.push_back(std::move(key));
  }
  for (const auto& key : keys) f.role.RegisterLookup("big", key);
  const size_t sent = f.role.FlushPendingLookups();
  const auto lookups = f.log.All<protocol::Lookup>();
  REQUIRE(lookups.size() == sent);
  REQUIRE(sent >= 3);  // 40 MB of hex
  size_t total = 0;
  for (const auto& lookup : lookups) {
    CHECK(lookup.round_seq == lookups.front().round_seq);  // one logical probe, one round
    CHECK(lookup.keys.size() <= protocol::kMaxListItems);
    CHECK(protocol::EncodeHeader(protocol::Message(lookup)).size() <= protocol::kMaxHeaderLen);
    total += lookup.keys.size();
    // The producer answers each part on its own.
    f.Answer("big", lookup.round_seq, lookup.keys, std::vector<bool>(lookup.keys.size(), true));
  }
  CHECK(total == keys.size());
  for (const auto& key : keys) CHECK(f.role.RegisterLookup("big", key) == ProbeAnswer::kHit);
}

TEST_CASE("client: many short keys split at 65536 a lookup", "[client][rounds]") {
  ClientFixture f;
  for (int i = 0; i < 70000; ++i) f.role.RegisterLookup("many", TestKey(i));
  REQUIRE(f.role.FlushPendingLookups() == 2);
  const auto lookups = f.log.All<protocol::Lookup>();
  CHECK(lookups.at(0).keys.size() == protocol::kMaxListItems);
  CHECK(lookups.at(1).keys.size() == 70000 - protocol::kMaxListItems);
}

TEST_CASE("client: a load whose fetch would not fit one frame is refused, nothing sent", "[client][rounds]") {
  ClientFixture f;
  std::vector<protocol::Key> keys;
  std::vector<protocol::SlotIndex> indexes;
  for (uint32_t i = 0; i < 3000; ++i) {
    protocol::Key key(4096, '\x02');
    key[0] = static_cast<char>(i & 0xff);
    key[1] = static_cast<char>(i >> 8);
    keys.push_back(std::move(key));
    indexes.push_back(i);
  }
  const Status status = f.role.RequestBlocks(1, "pd", keys, indexes, f.region->Sink());
  CHECK(status.code() == Status::Code::kInvalid);
  CHECK(f.log.frames.empty());
  CHECK(f.role.LoadsInFlight() == 0);
}

}  // namespace
}  // namespace kvpeer::session::testing
