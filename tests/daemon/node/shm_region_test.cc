#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "daemon/node/shm_region.h"
#include "tests/daemon/daemon_fixture.h"

namespace kvpeer::daemon {
namespace {

using testing::MakeMemfd;
using testing::ShmFile;

std::string BlockText(const ShmRegion& region, uint32_t index) {
  auto block = region.Block(index);
  return std::string(reinterpret_cast<const char*>(block.data()), block.size());
}

TEST_CASE("a region file is mapped shared: engine writes are visible and daemon writes reach the file") {
  ShmFile file(4 * 16);
  std::shared_ptr<ShmRegion> region;
  REQUIRE(ShmRegion::MapPath(file.path(), {4, 16, 0}, std::nullopt, &region).ok());
  CHECK(region->num_blocks() == 4);
  CHECK(region->bytes() == 64);

  file.Write(16, std::string(16, 'b'));
  CHECK(BlockText(*region, 1) == std::string(16, 'b'));

  std::memset(region->Block(3).data(), 'z', 16);
  CHECK(file.Read(48, 16) == std::string(16, 'z'));
}

TEST_CASE("a region at an offset that is not page aligned starts exactly at the offset") {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t offset = page + 100;
  ShmFile file(offset + 3 * 32);
  file.Write(offset, std::string(32, 'x') + std::string(32, 'y'));
  std::shared_ptr<ShmRegion> region;
  REQUIRE(ShmRegion::MapPath(file.path(), {3, 32, offset}, std::nullopt, &region).ok());
  CHECK(BlockText(*region, 0) == std::string(32, 'x'));
  CHECK(BlockText(*region, 1) == std::string(32, 'y'));
}

TEST_CASE("a region file smaller than offset + num_blocks * block_len is a bad_request naming the sizes") {
  ShmFile file(100);
  std::shared_ptr<ShmRegion> region;
  Status status = ShmRegion::MapPath(file.path(), {4, 32, 0}, std::nullopt, &region);
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == Status::Code::kInvalid);
  CHECK_THAT(status.message(), Catch::Contains("100 bytes") && Catch::Contains("= 128"));
  CHECK(region == nullptr);

  status = ShmRegion::MapPath(file.path(), {3, 32, 8}, std::nullopt, &region);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("offset 8"));
}

TEST_CASE("a missing region file is a bad_request naming the path") {
  std::shared_ptr<ShmRegion> region;
  Status status = ShmRegion::MapPath("/nonexistent/kvpeer-region", {1, 16, 0}, std::nullopt, &region);
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == Status::Code::kInvalid);
  CHECK_THAT(status.message(), Catch::Contains("/nonexistent/kvpeer-region"));
}

TEST_CASE("a region file of another owner is refused with the message of a missing one") {
  ShmFile file(64);
  std::shared_ptr<ShmRegion> region;
  const uint32_t other = ::geteuid() + 1;
  Status status = ShmRegion::MapPath(file.path(), {4, 16, 0}, other, &region);
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == Status::Code::kInvalid);
  const std::string expected = "cannot open region file '" + file.path() +
                               "': not accessible or not a regular file owned by uid " + std::to_string(other);
  CHECK(status.message() == expected);
  // A path that does not exist reads the same, so the message tells nothing of it.
  const std::string missing = file.path() + ".missing";
  Status absent = ShmRegion::MapPath(missing, {4, 16, 0}, other, &region);
  REQUIRE_FALSE(absent.ok());
  CHECK(absent.message() == "cannot open region file '" + missing +
                                "': not accessible or not a regular file owned by uid " + std::to_string(other));
  CHECK(ShmRegion::MapPath(file.path(), {4, 16, 0}, ::geteuid(), &region).ok());
}

TEST_CASE("a symlink to a region file is refused, not followed") {
  ShmFile file(64);
  const std::string link = file.path() + ".link";
  REQUIRE(::symlink(file.path().c_str(), link.c_str()) == 0);
  std::shared_ptr<ShmRegion> region;
  Status status = ShmRegion::MapPath(link, {4, 16, 0}, ::geteuid(), &region);
  ::unlink(link.c_str());
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == Status::Code::kInvalid);
  CHECK_THAT(status.message(), Catch::Contains("not accessible or not a regular file"));
}

TEST_CASE("a FIFO is refused at once, never opened for a blocking read") {
  const std::string fifo = "/dev/shm/kvpeer-test-fifo-" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::shared_ptr<ShmRegion> region;
  Status status = ShmRegion::MapPath(fifo, {1, 16, 0}, ::geteuid(), &region);
  ::unlink(fifo.c_str());
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("not accessible or not a regular file"));
}

TEST_CASE("a passed descriptor must be a regular file or memfd") {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  std::shared_ptr<ShmRegion> region;
  Status status = ShmRegion::MapFd(read_end.get(), {1, 16, 0}, &region);
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == Status::Code::kInvalid);
  CHECK_THAT(status.message(), Catch::Contains("not a regular file or memfd"));
}

TEST_CASE("shapes whose size overflows are refused without mapping") {
  ShmFile file(64);
  std::shared_ptr<ShmRegion> region;
  Status status = ShmRegion::MapPath(file.path(), {uint64_t{1} << 31, uint64_t{1} << 40, 0}, std::nullopt, &region);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("overflows"));
  status = ShmRegion::MapPath(file.path(), {1, 16, ~uint64_t{0} - 4}, std::nullopt, &region);
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == Status::Code::kInvalid);
  CHECK_FALSE(ShmRegion::MapPath(file.path(), {0, 16, 0}, std::nullopt, &region).ok());
  CHECK_FALSE(ShmRegion::MapPath(file.path(), {(uint64_t{1} << 31) + 1, 1, 0}, std::nullopt, &region).ok());
}

TEST_CASE("a region is mapped from a descriptor and outlives it") {
  std::shared_ptr<ShmRegion> region;
  {
    UniqueFd fd = MakeMemfd(2 * 16);
    REQUIRE(::pwrite(fd.get(), "0123456789abcdef", 16, 16) == 16);
    REQUIRE(ShmRegion::MapFd(fd.get(), {2, 16, 0}, &region).ok());
  }
  CHECK(BlockText(*region, 1) == "0123456789abcdef");

  UniqueFd small = MakeMemfd(8);
  Status status = ShmRegion::MapFd(small.get(), {2, 16, 0}, &region);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("descriptor") && Catch::Contains("8 bytes"));
}

TEST_CASE("a region whose file is truncated after mapping is no longer backed, for good") {
  UniqueFd fd = MakeMemfd(4 * 16);
  std::shared_ptr<ShmRegion> region;
  REQUIRE(ShmRegion::MapFd(fd.get(), {2, 16, 16}, &region).ok());
  CHECK(region->StillBacked());
  REQUIRE(::ftruncate(fd.get(), 2 * 16) == 0);  // no longer covers offset 16 + 2 blocks
  usleep(2000);                                 // past the re-check interval
  CHECK_FALSE(region->StillBacked());
  REQUIRE(::ftruncate(fd.get(), 4 * 16) == 0);  // grown back: still not trusted
  usleep(2000);
  CHECK_FALSE(region->StillBacked());
}

TEST_CASE("ReadMapped and WriteMapped move block bytes through the descriptor, at the block's file offset") {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t offset = page + 100;
  UniqueFd fd = MakeMemfd(offset + 2 * 32);
  std::shared_ptr<ShmRegion> region;
  REQUIRE(ShmRegion::MapFd(fd.get(), {2, 32, offset}, &region).ok());
  REQUIRE(::pwrite(fd.get(), std::string(32, 'r').data(), 32, static_cast<off_t>(offset + 32)) == 32);

  std::vector<uint8_t> out(16);
  REQUIRE(ShmRegion::ReadMapped(region->Block(1).data() + 8, out));
  CHECK(std::string(out.begin(), out.end()) == std::string(16, 'r'));

  const std::string text(32, 'w');
  REQUIRE(ShmRegion::WriteMapped(region->Block(0).data(),
                                 std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
  CHECK(BlockText(*region, 0) == text);  // the same pages the mapping shows
}

TEST_CASE("ReadMapped and WriteMapped fail on a truncated region instead of faulting, and never grow the file") {
  UniqueFd fd = MakeMemfd(4 * 4096);
  std::shared_ptr<ShmRegion> region;
  REQUIRE(ShmRegion::MapFd(fd.get(), {4, 4096, 0}, &region).ok());
  REQUIRE(::ftruncate(fd.get(), 4096 + 100) == 0);  // block 1 half gone, blocks 2 and 3 wholly

  std::vector<uint8_t> out(4096);
  CHECK(ShmRegion::ReadMapped(region->Block(0).data(), out));
  CHECK_FALSE(ShmRegion::ReadMapped(region->Block(1).data(), out));  // short read at the end of the file
  CHECK_FALSE(ShmRegion::ReadMapped(region->Block(3).data(), out));

  const std::vector<uint8_t> bytes(4096, 7);
  CHECK(ShmRegion::WriteMapped(region->Block(0).data(), bytes));
  CHECK_FALSE(ShmRegion::WriteMapped(region->Block(1).data(), bytes));
  CHECK_FALSE(ShmRegion::WriteMapped(region->Block(3).data(), bytes));
  CHECK(::lseek(fd.get(), 0, SEEK_END) == 4096 + 100);  // not grown back

  CHECK(ShmRegion::StillMapsFile(region->Block(0).data(), 4096));
  CHECK_FALSE(ShmRegion::StillMapsFile(region->Block(1).data(), 4096));

  // All of a frame's sources at once: false as soon as one is cut, in any order.
  const std::span<const uint8_t> whole = region->Block(0), cut = region->Block(3);
  const std::vector<uint8_t> heap(64);  // memory of no region: nothing to check
  CHECK(ShmRegion::StillMapFiles(std::vector<std::span<const uint8_t>>{whole, whole, heap}));
  CHECK_FALSE(ShmRegion::StillMapFiles(std::vector<std::span<const uint8_t>>{whole, cut, whole}));
  CHECK_FALSE(ShmRegion::StillMapFiles(std::vector<std::span<const uint8_t>>{cut}));
  CHECK(ShmRegion::StillMapFiles({}));
}

TEST_CASE("ReadMapped and WriteMapped copy memory of no region directly") {
  std::vector<uint8_t> heap(64, 3), out(64, 0);
  CHECK(ShmRegion::ReadMapped(heap.data(), out));
  CHECK(out == heap);
  const std::vector<uint8_t> bytes(64, 9);
  CHECK(ShmRegion::WriteMapped(heap.data(), bytes));
  CHECK(heap == bytes);
}

}  // namespace
}  // namespace kvpeer::daemon
