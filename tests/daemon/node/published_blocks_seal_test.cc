// Sealed blocks (docs/control-api.md, publish and store `seal`): the
// checksum a pin sends is the one taken when the slot was sealed, so a slot
// that changed afterwards fails the consumer's check (wire-protocol.md
// section 7).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "daemon/node/published_blocks.h"
#include "tests/daemon/daemon_fixture.h"
#include "protocol/block_checksum.h"

namespace kvpeer::daemon {
namespace {

using protocol::SlotIndex;

constexpr uint64_t kLen = 64;

uint64_t HashOf(const std::string& bytes) { return protocol::BlockChecksum(std::as_bytes(std::span(bytes))); }

// A sealed publish as the engine session makes one: the seals of the
// distinct slots, taken now.
Status PublishSealed(NodePublishedBlocks& index, EngineId engine, const std::vector<protocol::Key>& keys,
                     const std::vector<SlotIndex>& slots) {
  SlotSeals seals;
  for (SlotIndex slot : slots) seals[slot] = index.SealOf(engine, slot);
  return index.Publish(engine, keys, slots, &seals);
}

struct SealFixture {
  SealFixture() {
    file = std::make_unique<testing::ShmFile>(8 * kLen);
    REQUIRE(ShmRegion::MapPath(file->path(), {8, kLen, 0}, std::nullopt, &region).ok());
    index.AddEngine(1, region, [this](SlotIndex slot) { released.push_back(slot); });
  }
  void Fill(SlotIndex slot, char c) { file->Write(slot * kLen, std::string(kLen, c)); }

  std::unique_ptr<testing::ShmFile> file;
  std::shared_ptr<ShmRegion> region;
  NodePublishedBlocks index;
  std::vector<SlotIndex> released;
};

std::string Bytes(const session::PinRef& pin) {
  return std::string(reinterpret_cast<const char*>(pin->bytes().data()), pin->bytes().size());
}

TEST_CASE_METHOD(SealFixture, "a sealed slot sends the checksum of its bytes at publish, not of its bytes now") {
  Fill(2, 'a');
  REQUIRE(PublishSealed(index, 1, {"k"}, {2}).ok());
  Fill(2, 'b');  // the engine reused the slot too early
  session::PinRef pin = index.PinIfPublished("k");
  REQUIRE(pin);
  CHECK(pin->Checksum() == HashOf(std::string(kLen, 'a')));
  CHECK(protocol::BlockChecksum(std::as_bytes(pin->bytes())) == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "an unsealed slot sends the checksum of its bytes as they are read") {
  Fill(2, 'a');
  REQUIRE(index.Publish(1, {"k"}, {2}).ok());
  Fill(2, 'b');
  CHECK(index.PinIfPublished("k")->Checksum() == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "publishing a sealed slot again unsealed drops the seal") {
  Fill(2, 'a');
  REQUIRE(PublishSealed(index, 1, {"k"}, {2}).ok());
  Fill(2, 'b');
  REQUIRE(index.Publish(1, {"k"}, {2}).ok());
  CHECK(index.PinIfPublished("k")->Checksum() == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "sealing again takes the slot's bytes as they are then") {
  Fill(2, 'a');
  REQUIRE(PublishSealed(index, 1, {"k"}, {2}).ok());
  Fill(2, 'b');
  REQUIRE(PublishSealed(index, 1, {"k"}, {2}).ok());
  CHECK(index.PinIfPublished("k")->Checksum() == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "a pin keeps the seal it began with after the slot is unpublished") {
  Fill(2, 'a');
  REQUIRE(PublishSealed(index, 1, {"k"}, {2}).ok());
  session::PinRef pin = index.PinIfPublished("k");
  index.Unpublish(1, {"k"});
  Fill(2, 'b');
  CHECK(pin->Checksum() == HashOf(std::string(kLen, 'a')));
}

TEST_CASE_METHOD(SealFixture, "a slot withdrawn and published again unsealed is not sealed") {
  Fill(2, 'a');
  REQUIRE(PublishSealed(index, 1, {"k"}, {2}).ok());
  index.Unpublish(1, {"k"});
  Fill(2, 'b');
  REQUIRE(index.Publish(1, {"other"}, {2}).ok());
  CHECK(index.PinIfPublished("other")->Checksum() == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "a sealed store pin sends its seal; SealOf hashes the slot now") {
  Fill(5, 'x');
  const std::optional<uint64_t> seal = index.SealOf(1, 5);
  REQUIRE(seal == HashOf(std::string(kLen, 'x')));
  session::PinRef pin = index.Pin(1, 5, nullptr, seal);
  Fill(5, 'y');
  CHECK(pin->Checksum() == seal);
  CHECK(index.Pin(1, 5, nullptr)->Checksum() == HashOf(std::string(kLen, 'y')));
}

TEST_CASE_METHOD(SealFixture, "a truncated region has no seal and no checksum, and its sink no landed checksum") {
  Fill(1, 'a');
  REQUIRE(index.Publish(1, {"k"}, {1}).ok());
  session::PinRef pin = index.PinIfPublished("k");
  session::SlotSinkRef sink = MakeSlotSink(region);
  file->Truncate(0);
  // StillBacked looks at the file at most once a millisecond.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(index.SealOf(1, 1).has_value());
  CHECK_FALSE(pin->Checksum().has_value());
  CHECK_FALSE(sink->LandedChecksum(1).has_value());
}

TEST_CASE_METHOD(SealFixture, "a sealed re-publish of a slot whose bytes changed withdraws its older keys") {
  Fill(3, 'o');
  REQUIRE(PublishSealed(index, 1, {"old"}, {3}).ok());
  SECTION("bytes unchanged: both keys stay") {
    REQUIRE(PublishSealed(index, 1, {"same"}, {3}).ok());
    CHECK(index.keys_at(1, 3) == 2);
    CHECK(index.PinIfPublished("old"));
  }
  SECTION("bytes changed (the engine reused the slot): the old key goes, nothing is reported free") {
    Fill(3, 'n');
    REQUIRE(PublishSealed(index, 1, {"new"}, {3}).ok());
    CHECK(index.keys_at(1, 3) == 1);
    CHECK(index.PinIfPublished("old") == nullptr);
    CHECK(Bytes(index.PinIfPublished("new")) == std::string(kLen, 'n'));
    CHECK(index.published(1) == 1);
    CHECK(released.empty());
  }
}

TEST_CASE_METHOD(SealFixture, "a sealed block changed after it was sent fails the check and its keys are withdrawn") {
  Fill(2, 's');
  REQUIRE(PublishSealed(index, 1, {"k1", "k2"}, {2, 2}).ok());
  session::PinRef pin = index.PinIfPublished("k1");
  REQUIRE(pin);
  CHECK(pin->SealHoldsAfterWrite());
  Fill(2, 'x');  // vLLM evicted the block and reused the slot
  CHECK_FALSE(pin->SealHoldsAfterWrite());
  CHECK(index.PinIfPublished("k1") == nullptr);
  CHECK(index.PinIfPublished("k2") == nullptr);
  CHECK(index.published(1) == 0);
  CHECK(index.seals_broken() == 1);
  CHECK(released.empty());  // still pinned: reported when the pin drops
  pin.reset();
  CHECK(released == std::vector<SlotIndex>{2});
}

TEST_CASE_METHOD(SealFixture, "a broken seal withdraws nothing once the slot was sealed again") {
  Fill(2, 'a');
  REQUIRE(PublishSealed(index, 1, {"k1"}, {2}).ok());
  session::PinRef pin = index.PinIfPublished("k1");
  Fill(2, 'b');
  REQUIRE(PublishSealed(index, 1, {"k2"}, {2}).ok());  // the engine published the new block there
  CHECK_FALSE(pin->SealHoldsAfterWrite());             // what was sent is not what k1 named
  CHECK(index.PinIfPublished("k2"));                   // but k2's seal is the slot's now
  CHECK(index.seals_broken() == 0);
}

TEST_CASE_METHOD(SealFixture, "unsealed blocks always pass the after-write check") {
  REQUIRE(index.Publish(1, {"k1"}, {4}).ok());
  session::PinRef pin = index.PinIfPublished("k1");
  Fill(4, 'z');
  CHECK(pin->SealHoldsAfterWrite());
  CHECK(index.PinIfPublished("k1"));
}

TEST_CASE_METHOD(SealFixture, "a sealed publish that moves a key off a slot it also fills keeps the seal") {
  // Review finding: the move emptied slot 2 after its new seal was set, so
  // B stayed published there unsealed and slot 2 was reported released.
  Fill(2, 'x');
  REQUIRE(PublishSealed(index, 1, {"A", "A", "B"}, {2, 1, 2}).ok());
  CHECK(released.empty());
  session::PinRef pin = index.PinIfPublished("B");
  REQUIRE(pin);
  CHECK(pin->Checksum() == HashOf(std::string(kLen, 'x')));
  Fill(2, 'y');  // reused: the seal must catch it
  CHECK_FALSE(pin->SealHoldsAfterWrite());
  CHECK(index.PinIfPublished("B") == nullptr);
}

TEST_CASE_METHOD(SealFixture, "a move off a slot the request does not fill again reports it released once") {
  REQUIRE(PublishSealed(index, 1, {"A"}, {2}).ok());
  REQUIRE(PublishSealed(index, 1, {"A", "C", "C"}, {1, 2, 3}).ok());
  CHECK(released == std::vector<SlotIndex>{2});
  CHECK(index.keys_at(1, 2) == 0);
}

}  // namespace
}  // namespace kvpeer::daemon
