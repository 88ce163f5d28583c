// Per-block XXH3 checksums between two real sessions (wire-protocol.md
// section 7): negotiated per connection, sent by the producer, checked by the
// consumer after each block lands; a mismatch fails the load, not the session.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "protocol/block_checksum.h"
#include "protocol/features.h"
#include "tests/session/session_harness.h"

namespace kvpeer::session {
namespace {

using testing::SessionPair;
using testing::SessionPipe;
using State = PeerSession::State;

const std::vector<std::string> kXxh3 = {std::string(protocol::kFeatureXxh3)};

// B publishes "k1" at block 5; A looks it up and loads it into its slot 9.
SessionResults LoadOneBlock(SessionPair& p) {
  p.b.region->Fill(5, 77);
  p.b.index.Publish("k1", 5);
  PeerSession& a = *p.a.session;
  CHECK(a.RegisterLookup("r1", "k1") == ProbeAnswer::kRetry);
  a.FlushPendingLookups();
  p.pipe.Pump();
  REQUIRE(a.RegisterLookup("r1", "k1") == ProbeAnswer::kHit);
  REQUIRE(a.RequestBlocks(1, "r1", {"k1"}, {9}, p.a.region->Sink()).ok());
  p.pipe.Pump();
  return a.TakeResults();
}

const protocol::BlockData* FirstBlockData(const std::vector<protocol::Message>& delivered) {
  for (const protocol::Message& m : delivered) {
    if (const auto* data = std::get_if<protocol::BlockData>(&m)) return data;
  }
  return nullptr;
}

bool SlotsEqual(SessionPair& p) {
  auto x = p.a.region->Block(9);
  auto y = p.b.region->Block(5);
  return std::equal(x.begin(), x.end(), y.begin(), y.end());
}

TEST_CASE("with xxh3 on both sides every block_data carries the source block's checksum", "[checksum]") {
  SessionPair p;
  p.a.config.features = p.b.config.features = kXxh3;
  p.ConnectAndPump();
  CHECK(p.a.session->features_on() == kXxh3);
  const SessionResults r = LoadOneBlock(p);
  REQUIRE(r.loads.size() == 1);
  CHECK(r.loads[0].success);
  CHECK(r.checksum_failures.empty());
  CHECK(SlotsEqual(p));
  const protocol::BlockData* data = FirstBlockData(p.pipe.Delivered(SessionPipe::kA));
  REQUIRE(data != nullptr);
  REQUIRE(data->xxh3.valid());
  CHECK(data->xxh3.values == std::vector<uint64_t>{protocol::BlockChecksum(std::as_bytes(p.b.region->Block(5)))});
}

TEST_CASE("a block changed in flight fails its load with checksum; the session goes on", "[checksum]") {
  SessionPair p;
  p.a.config.features = p.b.config.features = kXxh3;
  p.ConnectAndPump();
  p.pipe.set_payload_tamper([](std::span<uint8_t> block) { block.back() ^= 0x01; });  // one bit
  const SessionResults r = LoadOneBlock(p);
  REQUIRE(r.loads.size() == 1);
  CHECK_FALSE(r.loads[0].success);
  CHECK_THAT(r.loads[0].reason, Catch::Contains("checksum mismatch on block 9"));
  REQUIRE(r.checksum_failures.size() == 1);
  CHECK(r.checksum_failures[0].kv_request_id == "r1");
  CHECK(r.checksum_failures[0].key == "k1");
  CHECK(r.checksum_failures[0].block_index == 9);
  CHECK(r.checksum_failures[0].expected != r.checksum_failures[0].landed);
  CHECK(p.a.session->state() == State::kReady);
  CHECK(p.b.session->state() == State::kReady);
  CHECK(p.a.session->LoadsInFlight() == 0);

  // The next load over the same connection, untouched, succeeds.
  p.pipe.set_payload_tamper(nullptr);
  p.b.index.Publish("k2", 6);
  p.b.region->Fill(6, 78);
  PeerSession& a = *p.a.session;
  CHECK(a.RegisterLookup("r2", "k2") == ProbeAnswer::kRetry);
  a.FlushPendingLookups();
  p.pipe.Pump();
  REQUIRE(a.RequestBlocks(2, "r2", {"k2"}, {10}, p.a.region->Sink()).ok());
  p.pipe.Pump();
  const SessionResults next = a.TakeResults();
  REQUIRE(next.loads.size() == 1);
  CHECK(next.loads[0].success);
}

TEST_CASE("with xxh3 on one side only no checksum travels and corruption goes unseen", "[checksum]") {
  for (bool a_offers : {true, false}) {
    INFO("a offers xxh3: " << a_offers);
    SessionPair p;
    (a_offers ? p.a : p.b).config.features = kXxh3;
    p.ConnectAndPump();
    CHECK(p.a.session->features_on().empty());
    p.pipe.set_payload_tamper([](std::span<uint8_t> block) { block.front() ^= 0x80; });
    const SessionResults r = LoadOneBlock(p);
    REQUIRE(r.loads.size() == 1);
    CHECK(r.loads[0].success);  // what the integration test proves the check catches
    const protocol::BlockData* data = FirstBlockData(p.pipe.Delivered(SessionPipe::kA));
    REQUIRE(data != nullptr);
    CHECK(data->xxh3.state == protocol::BlockChecksums::State::kAbsent);
  }
}

TEST_CASE("with xxh3 on a block_data without a valid xxh3 array is a violation", "[checksum]") {
  SessionPair p;
  p.a.config.features = p.b.config.features = kXxh3;
  p.ConnectAndPump();
  protocol::BlockData data{"r1", 1, {0}};
  SECTION("absent") {
    BlockDataPlan plan;
    const Status s = p.a.session->OnBlockDataHeader(data, &plan);
    CHECK(s.code() == Status::Code::kViolation);
    CHECK(s.message() == "block_data.xxh3: is required while the xxh3 feature is on");
  }
  SECTION("malformed") {
    data.xxh3 = protocol::BlockChecksums{
        protocol::BlockChecksums::State::kMalformed, {}, "xxh3[0]: must be 16 lowercase hex digits"};
    BlockDataPlan plan;
    const Status s = p.a.session->OnBlockDataHeader(data, &plan);
    CHECK(s.code() == Status::Code::kViolation);
    CHECK(s.message() == "block_data.xxh3[0]: must be 16 lowercase hex digits");
  }
  CHECK(p.a.session->state() == State::kClosed);
}

}  // namespace
}  // namespace kvpeer::session
