// BlockStaging: TLS payload gathered a piece at a time, handed over only
// whole, and dropped with the reads still in flight when its load ends
// (daemon/peer/block_staging.h; issue 11 item 3).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "daemon/peer/block_staging.h"

namespace kvpeer::daemon {
namespace {

using Arrival = BlockStaging::Arrival;

// Reads `bytes` into the staging's room for `target`, as the socket would.
Arrival Arrive(BlockStaging& staging, std::span<uint8_t> target, std::span<const uint8_t> bytes) {
  const std::span<uint8_t> room = staging.Room(target);
  REQUIRE(bytes.size() <= room.size());
  std::memcpy(room.data(), bytes.data(), bytes.size());
  return staging.Add(bytes.size());
}

TEST_CASE("a block trickled one byte at a time is handed over only whole", "[block_staging]") {
  std::vector<uint8_t> slot(64, 0x5a);
  std::vector<uint8_t> payload(64);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  BlockStaging staging;
  for (size_t i = 0; i + 1 < payload.size(); ++i) {
    CHECK(Arrive(staging, slot, std::span(payload).subspan(i, 1)) == Arrival::kPartial);
    CHECK(staging.Room(slot).size() == payload.size() - i - 1);
  }
  CHECK(slot == std::vector<uint8_t>(64, 0x5a));  // nothing of it is in the slot yet
  REQUIRE(Arrive(staging, slot, std::span(payload).last(1)) == Arrival::kWhole);
  CHECK(staging.Destination().data() == slot.data());
  CHECK(staging.Destination().size() == slot.size());
  CHECK(std::vector<uint8_t>(staging.Bytes().begin(), staging.Bytes().end()) == payload);
  staging.Clear();
  CHECK_FALSE(staging.staging());
}

TEST_CASE("a block longer than the bound is staged in pieces of kMaxPieceBytes", "[block_staging]") {
  constexpr size_t kPiece = BlockStaging::kMaxPieceBytes;
  std::vector<uint8_t> slot(kPiece + 100);
  BlockStaging staging;
  std::span<uint8_t> target(slot);
  CHECK(staging.Room(target).size() == kPiece);
  std::vector<uint8_t> chunk(kPiece, 0xee);
  REQUIRE(Arrive(staging, target, chunk) == Arrival::kWhole);
  CHECK(staging.Destination().size() == kPiece);
  staging.Clear();
  // The decoder moves on by the piece; the rest is the next piece.
  target = target.subspan(kPiece);
  CHECK(staging.Room(target).size() == 100);
  CHECK(staging.buffer_bytes() <= kPiece);
}

TEST_CASE("a dropped piece reports what it held, and a read in flight is discarded", "[block_staging]") {
  std::vector<uint8_t> slot(64);
  const std::vector<uint8_t> ten(10, 1);
  BlockStaging staging;
  REQUIRE(Arrive(staging, slot, ten) == Arrival::kPartial);
  // A read is now pending into the room; the load ends meanwhile.
  const std::span<uint8_t> pending = staging.Room(slot);
  CHECK(staging.Drop() == 10);
  CHECK_FALSE(staging.staging());
  CHECK(staging.Drop() == 0);  // nothing twice
  // The pending read completes into the buffer it was given (still there)...
  std::memset(pending.data(), 2, 5);
  // ... and its bytes go nowhere.
  CHECK(staging.Add(5) == Arrival::kDiscarded);
  CHECK(slot == std::vector<uint8_t>(64, 0));
  // The next frame's piece starts afresh, even at the same slot.
  CHECK(staging.Room(slot).size() == slot.size());
  CHECK(Arrive(staging, slot, ten) == Arrival::kPartial);
}

TEST_CASE("another target starts another piece", "[block_staging]") {
  std::vector<uint8_t> a(32), b(16);
  BlockStaging staging;
  CHECK(staging.Room(a).size() == 32);
  CHECK(staging.Room(b).size() == 16);
  CHECK(staging.Destination().data() == b.data());
}

}  // namespace
}  // namespace kvpeer::daemon
