#include <catch2/catch.hpp>

#include <cstring>

#include "daemon/node/published_blocks.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using protocol::Key;
using protocol::SlotIndex;

constexpr uint64_t kLen = 16;

struct IndexFixture {
  IndexFixture() {
    a_file = std::make_unique<testing::ShmFile>(8 * kLen);
    b_file = std::make_unique<testing::ShmFile>(8 * kLen);
    REQUIRE(ShmRegion::MapPath(a_file->path(), {8, kLen, 0}, std::nullopt, &a_region).ok());
    REQUIRE(ShmRegion::MapPath(b_file->path(), {8, kLen, 0}, std::nullopt, &b_region).ok());
    index.AddEngine(1, a_region, [this](SlotIndex slot) { a_released.push_back(slot); });
    index.AddEngine(2, b_region, [this](SlotIndex slot) { b_released.push_back(slot); });
  }

  std::unique_ptr<testing::ShmFile> a_file, b_file;
  std::shared_ptr<ShmRegion> a_region, b_region;
  NodePublishedBlocks index;
  std::vector<SlotIndex> a_released, b_released;
};

std::string Bytes(const session::PinRef& pin) {
  return std::string(reinterpret_cast<const char*>(pin->bytes().data()), pin->bytes().size());
}

TEST_CASE_METHOD(IndexFixture, "published keys are pinned with the bytes of their slot") {
  a_file->Write(3 * kLen, std::string(kLen, 'c'));
  CHECK(index.Publish(1, {"k1", "k2"}, {3, 4}).ok());
  CHECK(index.published(1) == 2);
  session::PinRef pin = index.PinIfPublished("k1");
  REQUIRE(pin);
  CHECK(Bytes(pin) == std::string(kLen, 'c'));
  CHECK(index.live_pins(1, 3) == 1);
  CHECK(index.PinIfPublished("nope") == nullptr);
  pin.reset();
  CHECK(index.live_pins(1, 3) == 0);
}

TEST_CASE_METHOD(IndexFixture, "unpublish reports unpinned slots released and pinned ones pinned") {
  REQUIRE(index.Publish(1, {"k1", "k2"}, {3, 4}).ok());
  session::PinRef pin = index.PinIfPublished("k2");
  UnpublishResult result = index.Unpublish(1, {"k1", "k2", "unknown"});
  CHECK(result.released == std::vector<SlotIndex>{3});
  CHECK(result.pinned == std::vector<SlotIndex>{4});
  CHECK(index.PinIfPublished("k2") == nullptr);
  CHECK(a_released.empty());
  // The pin still reads the slot; its release is reported when it drops.
  pin.reset();
  CHECK(a_released == std::vector<SlotIndex>{4});
  CHECK(index.published(1) == 0);
}

TEST_CASE_METHOD(IndexFixture, "an engine cannot unpublish another engine's key") {
  REQUIRE(index.Publish(2, {"k1"}, {5}).ok());
  UnpublishResult result = index.Unpublish(1, {"k1"});
  CHECK(result.released.empty());
  CHECK(result.pinned.empty());
  CHECK(index.PinIfPublished("k1"));
}

TEST_CASE_METHOD(IndexFixture, "re-publishing a key this engine holds moves it; the old slot is reported free") {
  REQUIRE(index.Publish(1, {"k1"}, {3}).ok());
  SECTION("within one engine, unpinned: reported at once") {
    REQUIRE(index.Publish(1, {"k1"}, {6}).ok());
    CHECK(a_released == std::vector<SlotIndex>{3});
    CHECK(index.published(1) == 1);
  }
  SECTION("within one engine, pinned: reported when the pin drops") {
    session::PinRef pin = index.PinIfPublished("k1");
    REQUIRE(index.Publish(1, {"k1"}, {6}).ok());
    CHECK(a_released.empty());
    pin.reset();
    CHECK(a_released == std::vector<SlotIndex>{3});
    CHECK(index.published(1) == 1);
  }
  SECTION("to the same slot again: nothing changes") {
    REQUIRE(index.Publish(1, {"k1"}, {3}).ok());
    CHECK(a_released.empty());
    CHECK(index.published(1) == 1);
  }
  CHECK(index.size() == 1);
}

TEST_CASE_METHOD(IndexFixture, "another engine publishing a held key adds a holding and moves nothing") {
  a_file->Write(3 * kLen, std::string(kLen, 'a'));
  b_file->Write(0, std::string(kLen, 'b'));
  REQUIRE(index.Publish(1, {"k1"}, {3}).ok());
  session::PinRef pin = index.PinIfPublished("k1");
  REQUIRE(index.Publish(2, {"k1"}, {0}).ok());
  CHECK(index.holders("k1") == 2);
  CHECK(index.published(1) == 1);
  CHECK(index.published(2) == 1);
  CHECK(index.size() == 1);
  pin.reset();
  // Engine 1 never hears of a slot because of engine 2.
  CHECK(a_released.empty());
  CHECK(b_released.empty());
  // Any holder may serve: the first one does while it holds the key.
  REQUIRE(index.PinIfPublished("k1"));
  CHECK(Bytes(index.PinIfPublished("k1")) == std::string(kLen, 'a'));
}

TEST_CASE_METHOD(IndexFixture, "each engine's unpublish withdraws only its own holding") {
  b_file->Write(0, std::string(kLen, 'b'));
  REQUIRE(index.Publish(1, {"k1"}, {3}).ok());
  REQUIRE(index.Publish(2, {"k1"}, {0}).ok());
  UnpublishResult result = index.Unpublish(1, {"k1"});
  CHECK(result.released == std::vector<SlotIndex>{3});
  CHECK(index.holders("k1") == 1);
  session::PinRef pin = index.PinIfPublished("k1");
  REQUIRE(pin);
  CHECK(Bytes(pin) == std::string(kLen, 'b'));
  CHECK(index.published(2) == 1);
  CHECK(b_released.empty());
  pin.reset();
  UnpublishResult last = index.Unpublish(2, {"k1"});
  CHECK(last.released == std::vector<SlotIndex>{0});
  CHECK(index.PinIfPublished("k1") == nullptr);
  CHECK(index.size() == 0);
}

TEST_CASE_METHOD(IndexFixture, "an engine's exit withdraws only its own holdings") {
  REQUIRE(index.Publish(1, {"k1", "k2"}, {3, 4}).ok());
  REQUIRE(index.Publish(2, {"k1"}, {0}).ok());
  index.RemoveEngine(1);
  CHECK(index.holders("k1") == 1);
  CHECK(index.holders("k2") == 0);
  CHECK(index.PinIfPublished("k1"));
  CHECK(index.PinIfPublished("k2") == nullptr);
  CHECK(index.published(2) == 1);
  CHECK(b_released.empty());
  CHECK(index.size() == 1);
}

TEST_CASE_METHOD(IndexFixture, "a slot holding two keys is free only when both are gone") {
  REQUIRE(index.Publish(1, {"k1", "k2"}, {2, 2}).ok());
  UnpublishResult first = index.Unpublish(1, {"k1"});
  CHECK(first.released.empty());
  CHECK(first.pinned.empty());
  UnpublishResult second = index.Unpublish(1, {"k2"});
  CHECK(second.released == std::vector<SlotIndex>{2});
}

TEST_CASE_METHOD(IndexFixture, "removing an engine withdraws its keys; pins keep its region mapped") {
  a_file->Write(1 * kLen, std::string(kLen, 'q'));
  REQUIRE(index.Publish(1, {"k1", "k2"}, {1, 2}).ok());
  REQUIRE(index.Publish(2, {"k3"}, {1}).ok());
  session::PinRef pin = index.PinIfPublished("k1");
  std::weak_ptr<ShmRegion> weak = a_region;
  a_region.reset();
  index.RemoveEngine(1);
  CHECK(index.PinIfPublished("k2") == nullptr);
  CHECK(index.PinIfPublished("k3"));
  CHECK(index.size() == 1);
  CHECK_FALSE(weak.expired());
  CHECK(Bytes(pin) == std::string(kLen, 'q'));
  pin.reset();
  CHECK(weak.expired());
  CHECK(a_released.empty());  // a removed engine hears nothing more
}

TEST_CASE_METHOD(IndexFixture, "a pin's attachment is released after the slot is unpinned") {
  struct Probe {
    Probe(NodePublishedBlocks& index, uint32_t* pins_seen) : index(index), pins_seen(pins_seen) {}
    ~Probe() { *pins_seen = index.live_pins(1, 5); }
    NodePublishedBlocks& index;
    uint32_t* pins_seen;
  };
  uint32_t pins_seen = 99;
  auto probe = std::make_shared<Probe>(index, &pins_seen);
  session::PinRef first = index.Pin(1, 5, probe);
  session::PinRef second = index.Pin(1, 5, probe);
  probe.reset();
  CHECK(index.live_pins(1, 5) == 2);
  first.reset();
  CHECK(pins_seen == 99);
  second.reset();
  CHECK(pins_seen == 0);
  CHECK(a_released.empty());  // never published: nothing to report
}

TEST_CASE_METHOD(IndexFixture, "keys per slot are bounded; a refused publish changes nothing") {
  index.set_limits({.max_keys_per_slot = 2, .max_key_bytes = 0});
  REQUIRE(index.Publish(1, {"k1", "k2"}, {1, 1}).ok());
  Status refused = index.Publish(1, {"k3", "k4"}, {1, 5});
  CHECK(refused.code() == Status::Code::kConflict);
  CHECK(refused.message().find("max-keys-per-slot (2)") != std::string::npos);
  CHECK(index.PinIfPublished("k4") == nullptr);
  CHECK(index.published(1) == 2);
  // Moving a key away makes room; re-publishing where it is costs nothing.
  CHECK(index.Publish(1, {"k2", "k3", "k1"}, {5, 1, 1}).ok());
  CHECK(index.keys_at(1, 1) == 2);
  // Another engine's keys at its own slot 1 count for it alone.
  CHECK(index.Publish(2, {"k1", "k2"}, {1, 1}).ok());
}

TEST_CASE_METHOD(IndexFixture, "published key bytes are bounded per engine") {
  const uint64_t per_key = 2 + NodePublishedBlocks::kHoldingBytes;
  index.set_limits({.max_keys_per_slot = 0, .max_key_bytes = 3 * per_key});
  REQUIRE(index.Publish(1, {"k1", "k2", "k3"}, {1, 2, 3}).ok());
  CHECK(index.published_key_bytes(1) == 3 * per_key);
  Status refused = index.Publish(1, {"k4"}, {4});
  CHECK(refused.code() == Status::Code::kConflict);
  CHECK(refused.message().find("max-published-key-bytes") != std::string::npos);
  CHECK(index.Publish(2, {"k4"}, {4}).ok());  // engine 2 has its own budget
  index.Unpublish(1, {"k1"});
  CHECK(index.Publish(1, {"k4"}, {4}).ok());
  CHECK(index.published_key_bytes(1) == 3 * per_key);
  index.RemoveEngine(1);
  CHECK(index.published_key_bytes(1) == 0);
}

TEST_CASE("a slot sink writes into the region and keeps it mapped") {
  testing::ShmFile file(4 * kLen);
  std::shared_ptr<ShmRegion> region;
  REQUIRE(ShmRegion::MapPath(file.path(), {4, kLen, 0}, std::nullopt, &region).ok());
  session::SlotSinkRef sink = MakeSlotSink(region);
  region.reset();
  std::memset(sink->Slot(2).data(), 'w', kLen);
  CHECK(file.Read(2 * kLen, kLen) == std::string(kLen, 'w'));
  CHECK(sink->Slot(4).empty());
}

}  // namespace
}  // namespace kvpeer::daemon
