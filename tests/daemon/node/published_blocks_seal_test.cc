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

struct SealFixture {
  SealFixture() {
    file = std::make_unique<testing::ShmFile>(8 * kLen);
    REQUIRE(ShmRegion::MapPath(file->path(), {8, kLen, 0}, std::nullopt, &region).ok());
    index.AddEngine(1, region, [](SlotIndex) {});
  }
  void Fill(SlotIndex slot, char c) { file->Write(slot * kLen, std::string(kLen, c)); }

  std::unique_ptr<testing::ShmFile> file;
  std::shared_ptr<ShmRegion> region;
  NodePublishedBlocks index;
};

TEST_CASE_METHOD(SealFixture, "a sealed slot sends the checksum of its bytes at publish, not of its bytes now") {
  Fill(2, 'a');
  index.Publish(1, {"k"}, {2}, /*seal=*/true);
  Fill(2, 'b');  // the engine reused the slot too early
  session::PinRef pin = index.PinIfPublished("k");
  REQUIRE(pin);
  CHECK(pin->Checksum() == HashOf(std::string(kLen, 'a')));
  CHECK(protocol::BlockChecksum(std::as_bytes(pin->bytes())) == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "an unsealed slot sends the checksum of its bytes as they are read") {
  Fill(2, 'a');
  index.Publish(1, {"k"}, {2});
  Fill(2, 'b');
  CHECK(index.PinIfPublished("k")->Checksum() == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "publishing a sealed slot again unsealed drops the seal") {
  Fill(2, 'a');
  index.Publish(1, {"k"}, {2}, true);
  Fill(2, 'b');
  index.Publish(1, {"k"}, {2}, false);
  CHECK(index.PinIfPublished("k")->Checksum() == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "sealing again takes the slot's bytes as they are then") {
  Fill(2, 'a');
  index.Publish(1, {"k"}, {2}, true);
  Fill(2, 'b');
  index.Publish(1, {"k"}, {2}, true);
  CHECK(index.PinIfPublished("k")->Checksum() == HashOf(std::string(kLen, 'b')));
}

TEST_CASE_METHOD(SealFixture, "a pin keeps the seal it began with after the slot is unpublished") {
  Fill(2, 'a');
  index.Publish(1, {"k"}, {2}, true);
  session::PinRef pin = index.PinIfPublished("k");
  index.Unpublish(1, {"k"});
  Fill(2, 'b');
  CHECK(pin->Checksum() == HashOf(std::string(kLen, 'a')));
}

TEST_CASE_METHOD(SealFixture, "a slot withdrawn and published again unsealed is not sealed") {
  Fill(2, 'a');
  index.Publish(1, {"k"}, {2}, true);
  index.Unpublish(1, {"k"});
  Fill(2, 'b');
  index.Publish(1, {"other"}, {2});
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
  index.Publish(1, {"k"}, {1});
  session::PinRef pin = index.PinIfPublished("k");
  session::SlotSinkRef sink = MakeSlotSink(region);
  file->Truncate(0);
  // StillBacked looks at the file at most once a millisecond.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(index.SealOf(1, 1).has_value());
  CHECK_FALSE(pin->Checksum().has_value());
  CHECK_FALSE(sink->LandedChecksum(1).has_value());
}

}  // namespace
}  // namespace kvpeer::daemon
