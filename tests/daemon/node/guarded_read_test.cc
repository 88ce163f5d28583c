// Reading engine memory that may vanish (daemon/node/guarded_read.h): a region
// file shrunk under the mapping makes a hash of its pages fail, not the
// daemon die of SIGBUS.
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <string>

#include "daemon/node/guarded_read.h"
#include "tests/daemon/daemon_fixture.h"
#include "protocol/block_checksum.h"

namespace kvpeer::daemon {
namespace {

constexpr size_t kPage = 4096;

// A shared mapping of a file of `pages` pages.
struct MappedFile {
  explicit MappedFile(size_t pages) : file(pages * kPage), size(pages * kPage) {
    UniqueFd fd(::open(file.path().c_str(), O_RDWR | O_CLOEXEC));
    void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    REQUIRE(at != MAP_FAILED);
    base = static_cast<uint8_t*>(at);
  }
  ~MappedFile() { ::munmap(base, size); }
  std::span<const uint8_t> bytes() const { return {base, size}; }

  testing::ShmFile file;
  size_t size;
  uint8_t* base = nullptr;
};

TEST_CASE("a guarded checksum of intact memory is XXH3-64 of its bytes") {
  MappedFile mapped(4);
  mapped.file.Write(100, "some bytes");
  CHECK(GuardedChecksum(mapped.bytes()) == protocol::BlockChecksum(std::as_bytes(mapped.bytes())));
}

TEST_CASE("a guarded checksum of pages whose file was truncated is nullopt, and the process lives on") {
  MappedFile mapped(4);
  mapped.file.Truncate(kPage);  // pages 1..3 are gone
  CHECK_FALSE(GuardedChecksum(mapped.bytes()).has_value());
  CHECK(GuardedChecksum(mapped.bytes().first(kPage)).has_value());  // page 0 is still there
  // Again, so the handler is shown to stay in place after a recovery.
  CHECK_FALSE(GuardedChecksum(mapped.bytes().subspan(2 * kPage)).has_value());
  // The jump out of the handler leaves SIGBUS deliverable (the mask is not
  // saved per read, it is mended after a fault).
  sigset_t now;
  REQUIRE(::pthread_sigmask(SIG_BLOCK, nullptr, &now) == 0);
  CHECK(sigismember(&now, SIGBUS) == 0);
}

TEST_CASE("a SIGBUS sent with kill() or sigqueue() is ignored and leaves the guard in place") {
  // Issue 25, finding 6: one stray SIGBUS outside a guarded read used to
  // put the previous (default) disposition back, so the next truncated
  // region killed the process.
  MappedFile mapped(4);
  InstallSigbusGuard();
  REQUIRE(::kill(::getpid(), SIGBUS) == 0);                // SI_USER: would kill the test without the guard
  REQUIRE(::sigqueue(::getpid(), SIGBUS, sigval{}) == 0);  // SI_QUEUE
  REQUIRE(::raise(SIGBUS) == 0);                           // SI_TKILL
  CHECK(GuardedChecksum(mapped.bytes()).has_value());
  mapped.file.Truncate(kPage);
  // The guard still turns a real fault into nullopt, again and again.
  CHECK_FALSE(GuardedChecksum(mapped.bytes()).has_value());
  REQUIRE(::kill(::getpid(), SIGBUS) == 0);
  CHECK_FALSE(GuardedChecksum(mapped.bytes().subspan(kPage)).has_value());
  struct sigaction now {};
  REQUIRE(::sigaction(SIGBUS, nullptr, &now) == 0);
  CHECK((now.sa_flags & SA_SIGINFO) != 0);  // still our handler, not SIG_DFL
}

}  // namespace
}  // namespace kvpeer::daemon
