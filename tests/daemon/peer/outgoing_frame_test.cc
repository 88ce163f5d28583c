// OutgoingFrame over real (memfd) regions: the bytes of a block_data frame
// for plain TCP (gathered from the mapping) and TLS (bounced through
// pread), and a torn source finished with zeros (wire spec section 6, "A
// torn source").
#include <catch2/catch.hpp>

#include <unistd.h>

#include <string>
#include <vector>

#include "daemon/peer/outgoing_frame.h"
#include "daemon/node/shm_region.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using testing::MakeMemfd;

constexpr uint64_t kBlockLen = 64 * 1024;

class RegionPin : public session::PinnedBlock {
 public:
  RegionPin(std::shared_ptr<ShmRegion> region, uint32_t index) : region_(std::move(region)), index_(index) {}
  std::span<const uint8_t> bytes() const override { return region_->Block(index_); }

 private:
  std::shared_ptr<ShmRegion> region_;
  uint32_t index_;
};

struct Fixture {
  UniqueFd fd = MakeMemfd(8 * kBlockLen);
  std::shared_ptr<ShmRegion> region;
  std::vector<session::PinRef> blocks;
  std::string head = "HEAD-OF-FRAME";

  Fixture() {
    REQUIRE(ShmRegion::MapFd(fd.get(), {8, kBlockLen, 0}, &region).ok());
    for (uint32_t i = 0; i < 8; ++i) {
      std::fill(region->Block(i).begin(), region->Block(i).end(), static_cast<uint8_t>('a' + i));
      blocks.push_back(std::make_shared<RegionPin>(region, i));
    }
  }

  std::string Expected() const {
    std::string all = head;
    for (uint32_t i = 0; i < 8; ++i) all += std::string(kBlockLen, static_cast<char>('a' + i));
    return all;
  }
};

// Drains the frame `step` bytes at a time, as a socket taking that much per
// write would; `tear_at` (a frame offset) makes the source fail there like
// an EFAULT.
std::string Drain(OutgoingFrame& out, size_t step, size_t tear_at = SIZE_MAX) {
  std::string wire;
  while (!out.done()) {
    if (wire.size() >= tear_at && !out.torn()) REQUIRE(out.TearHere());
    size_t taken = 0;
    for (const auto& buffer : out.Next()) {
      const size_t n = std::min(buffer.size(), step - taken);
      wire.append(static_cast<const char*>(buffer.data()), n);
      taken += n;
      if (taken == step) break;
    }
    REQUIRE(taken > 0);
    out.Consumed(taken);
  }
  return wire;
}

TEST_CASE("OutgoingFrame: plain and bounced frames carry the head and the blocks' bytes") {
  Fixture f;
  for (const bool bounced : {false, true}) {
    std::vector<uint8_t> bounce;
    OutgoingFrame out(f.head, f.blocks, bounced ? &bounce : nullptr);
    CHECK(Drain(out, 100'000) == f.Expected());
    CHECK_FALSE(out.CheckSourcesAfterWrite());
    CHECK(bounce.size() <= OutgoingFrame::kBounceBytes);
  }
}

TEST_CASE("OutgoingFrame: a tear in plain mode finishes the frame with zeros") {
  Fixture f;
  OutgoingFrame out(f.head, f.blocks, nullptr);
  const size_t tear_at = f.head.size() + 3 * kBlockLen + 5;
  const std::string wire = Drain(out, 4096 + 1, tear_at);
  REQUIRE(wire.size() == f.Expected().size());
  CHECK(out.torn());
  const size_t torn_from = wire.find_first_of('\0', f.head.size());
  CHECK(torn_from >= tear_at);
  CHECK(torn_from < tear_at + 4096 + 1);
  CHECK(wire.substr(0, torn_from) == f.Expected().substr(0, torn_from));
  CHECK(wire.find_first_not_of('\0', torn_from) == std::string::npos);
}

TEST_CASE("OutgoingFrame: the head cannot be torn") {
  Fixture f;
  OutgoingFrame out(f.head, f.blocks, nullptr);
  CHECK_FALSE(out.TearHere());
}

TEST_CASE("OutgoingFrame: a bounced frame whose region was truncated is zeros from the first unread byte") {
  Fixture f;
  std::vector<uint8_t> bounce;
  OutgoingFrame again(f.head, f.blocks, &bounce);
  std::string head_part;
  // The head, then the first bounce chunk, read before the truncation.
  for (const auto& buffer : again.Next()) head_part.append(static_cast<const char*>(buffer.data()), buffer.size());
  again.Consumed(head_part.size());
  std::string first_chunk;
  for (const auto& buffer : again.Next()) first_chunk.append(static_cast<const char*>(buffer.data()), buffer.size());
  REQUIRE(first_chunk.size() == OutgoingFrame::kBounceBytes);
  again.Consumed(first_chunk.size());
  REQUIRE(::ftruncate(f.fd.get(), 5 * kBlockLen + 10) == 0);  // blocks 5.. gone (5 partly)
  const std::string rest = Drain(again, 50'000);
  const std::string wire = head_part + first_chunk + rest;
  REQUIRE(wire.size() == f.Expected().size());
  CHECK(again.torn());
  CHECK(again.CheckSourcesAfterWrite());
  const size_t gone = f.head.size() + 5 * kBlockLen;  // the read of block 5 falls short
  CHECK(wire.substr(0, gone) == f.Expected().substr(0, gone));
  CHECK(wire.find_first_not_of('\0', gone) == std::string::npos);
}

TEST_CASE("OutgoingFrame: a plain frame written whole from a region truncated meanwhile counts as torn") {
  Fixture f;
  OutgoingFrame out(f.head, f.blocks, nullptr);
  // A mid-page truncation makes the kernel read zeros, not fault; only the
  // check after the write sees it.
  REQUIRE(::ftruncate(f.fd.get(), 7 * kBlockLen + 100) == 0);
  std::string wire;
  for (const auto& buffer : out.Next()) {
    const auto* p = static_cast<const char*>(buffer.data());
    // Block 7 is past the end of the file: not touched here (SIGBUS).
    if (p >= reinterpret_cast<const char*>(f.region->Block(7).data()) &&
        p < reinterpret_cast<const char*>(f.region->Block(7).data()) + kBlockLen) {
      wire.append(buffer.size(), '\0');
      continue;
    }
    wire.append(p, buffer.size());
  }
  out.Consumed(wire.size());
  REQUIRE(out.done());
  CHECK(out.CheckSourcesAfterWrite());
  CHECK(out.torn());
}

}  // namespace
}  // namespace kvpeer::daemon
