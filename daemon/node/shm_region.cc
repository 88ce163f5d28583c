#include "daemon/node/shm_region.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "base/unique_fd.h"

namespace kvpeer::daemon {
namespace {

constexpr uint64_t kMaxNumBlocks = uint64_t{1} << 31;

std::string Errno(int err) { return std::strerror(err); }

// Checks the shape and computes offset + num_blocks * block_len without
// overflow. The result must also fit size_t and off_t, since it becomes an
// mmap length and a file offset.
Status CheckShape(const RegionShape& shape, uint64_t* end) {
  if (shape.num_blocks == 0 || shape.num_blocks > kMaxNumBlocks) {
    return Status::Invalid("num_blocks must be 1 ..= " + std::to_string(kMaxNumBlocks) + ", is " +
                           std::to_string(shape.num_blocks));
  }
  if (shape.block_len == 0) return Status::Invalid("block_len must be > 0");
  constexpr uint64_t kMaxEnd = static_cast<uint64_t>(std::numeric_limits<off_t>::max());
  const uint64_t max_bytes = kMaxEnd / shape.num_blocks;
  if (shape.block_len > max_bytes || shape.offset > kMaxEnd - shape.num_blocks * shape.block_len) {
    return Status::Invalid("offset " + std::to_string(shape.offset) + " + num_blocks " +
                           std::to_string(shape.num_blocks) + " * block_len " + std::to_string(shape.block_len) +
                           " overflows a file size");
  }
  *end = shape.offset + shape.num_blocks * shape.block_len;
  return Status::Ok();
}

constexpr uint64_t kSmallPage = 4096;

// The alignment of a mapping of `fd`: its filesystem's block size on
// hugetlbfs (a hugetlbfs file or a memfd made with MFD_HUGETLB, whose
// pages are all huge), else the system page.
uint64_t MappingGranule(int fd) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC && fs.f_bsize > 0) {
    return static_cast<uint64_t>(fs.f_bsize);
  }
  return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Asks for huge pages where the region's memory may have them (docs/
// performance.md, "Cold pages and huge pages"): a tmpfs mounted huge=advise,
// or memfd/shm under shmem_enabled=advise. A tmpfs mounted huge=always or
// within_size, and hugetlbfs, use them without asking; the kernel aligns a
// shared mapping of such a file to the huge page itself. Each huge page is
// one first-touch fault of the daemon's mapping instead of 512, which is
// what a cold transfer pays on a paravirtualized guest. Best effort: a
// kernel without transparent huge pages refuses, and nothing changes.
void AdviseHugePages(void* mapping, size_t len) {
#ifdef MADV_HUGEPAGE
  (void)::madvise(mapping, len, MADV_HUGEPAGE);
#endif
}

// Live regions by the address of block 0, for ReadMapped/WriteMapped.
struct MappedRegions {
  std::mutex mutex;
  std::map<const uint8_t*, const ShmRegion*> by_base;
};
MappedRegions& Mapped() {
  static MappedRegions regions;
  return regions;
}

}  // namespace

Status ShmRegion::MapPath(const std::string& path, const RegionShape& shape, std::optional<uint32_t> owner_uid,
                          std::shared_ptr<ShmRegion>* out) {
  const std::string what = "region file '" + path + "'";
  // One message for "absent", "not traversable", "not a regular file" and
  // "not the engine's": telling them apart would let an engine probe paths
  // it cannot reach itself (docs/security.md "Control socket and engines").
  const std::string refused = "cannot open " + what + ": not accessible or not a regular file owned by " +
                              (owner_uid ? "uid " + std::to_string(*owner_uid) : std::string("the engine"));
  auto acceptable = [&](const struct stat& st) {
    return S_ISREG(st.st_mode) && (!owner_uid || st.st_uid == *owner_uid);
  };
  // Checked before opening, so a FIFO or a device is never opened; checked
  // again on the descriptor, since the path may change in between.
  struct stat before {};
  if (::lstat(path.c_str(), &before) != 0 || !acceptable(before)) return Status::Invalid(refused);
  // No final symlink, no blocking open, read-write as the mapping needs.
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return Status::Invalid(refused);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !acceptable(st)) return Status::Invalid(refused);
  return Map(fd.get(), what, shape, out);
}

Status ShmRegion::MapFd(int fd, const RegionShape& shape, std::shared_ptr<ShmRegion>* out) {
  const std::string what = "the region passed by descriptor";
  // A memfd is a regular file to fstat; a pipe, socket or device is not.
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::Invalid(what + ": fstat failed: " + Errno(errno));
  if (!S_ISREG(st.st_mode)) {
    return Status::Invalid(what + " is not a regular file or memfd");
  }
  return Map(fd, what, shape, out);
}

Status ShmRegion::Map(int fd, const std::string& what, const RegionShape& shape, std::shared_ptr<ShmRegion>* out) {
  uint64_t end = 0;
  if (Status bad = CheckShape(shape, &end); !bad.ok()) return bad;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::Invalid(what + ": fstat failed: " + Errno(errno));
  const uint64_t size = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  if (size < end) {
    return Status::Invalid(what + " has " + std::to_string(size) + " bytes, fewer than offset " +
                           std::to_string(shape.offset) + " + num_blocks " + std::to_string(shape.num_blocks) +
                           " * block_len " + std::to_string(shape.block_len) + " = " + std::to_string(end));
  }
  // mmap wants a file offset aligned to the file's pages (a hugetlbfs
  // file's are huge): map from the page holding `offset` and remember how
  // far into it block 0 starts.
  const uint64_t page = MappingGranule(fd);
  const uint64_t lead = shape.offset % page;
  uint64_t mapping_len = lead + (end - shape.offset);
  if (page > kSmallPage) mapping_len = (mapping_len + page - 1) / page * page;  // hugetlbfs maps whole pages
  if (mapping_len > std::numeric_limits<size_t>::max()) {
    return Status::Invalid(what + ": " + std::to_string(mapping_len) + " bytes cannot be mapped");
  }
  void* mapping = ::mmap(nullptr, static_cast<size_t>(mapping_len), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                         static_cast<off_t>(shape.offset - lead));
  if (mapping == MAP_FAILED) {
    return Status::Invalid(what + " cannot be mapped read-write shared: " + Errno(errno));
  }
  AdviseHugePages(mapping, static_cast<size_t>(mapping_len));
  UniqueFd kept(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!kept.valid()) {
    const int err = errno;
    ::munmap(mapping, static_cast<size_t>(mapping_len));
    return Status::Invalid(what + ": cannot keep a descriptor: " + Errno(err));
  }
  uint8_t* base = static_cast<uint8_t*>(mapping) + lead;
  out->reset(new ShmRegion(mapping, static_cast<size_t>(mapping_len), base, shape, std::move(kept)));
  std::lock_guard lock(Mapped().mutex);
  Mapped().by_base[base] = out->get();
  return Status::Ok();
}

ShmRegion::~ShmRegion() {
  {
    std::lock_guard lock(Mapped().mutex);
    Mapped().by_base.erase(base_);
  }
  ::munmap(mapping_, mapping_len_);
}

bool ShmRegion::StillBacked() const {
  // Often enough that a truncation is seen before the next frame; rarely
  // enough that a busy transfer pays one fstat per millisecond at most.
  constexpr auto kRecheckInterval = std::chrono::milliseconds(1);
  if (truncated_.load(std::memory_order_relaxed)) return false;
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch() / std::chrono::nanoseconds(1);
  const int64_t checked = checked_at_ns_.load(std::memory_order_relaxed);
  if (checked != std::numeric_limits<int64_t>::min() &&
      now - checked < std::chrono::nanoseconds(kRecheckInterval).count()) {
    return true;
  }
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) return true;  // cannot tell; the kernel's EFAULT still guards
  const uint64_t size = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  const bool truncated = size < shape_.offset + bytes();
  if (truncated) truncated_.store(true, std::memory_order_relaxed);  // never un-truncated
  checked_at_ns_.store(now, std::memory_order_relaxed);
  return !truncated;
}

std::span<uint8_t> ShmRegion::Block(uint32_t index) const {
  return {base_ + uint64_t{index} * shape_.block_len, static_cast<size_t>(shape_.block_len)};
}

namespace {

// The region whose blocks hold [at, at + len), as a descriptor and the file
// offset of `at`; false when no live region does.
bool Locate(const uint8_t* at, size_t len, int* fd, uint64_t* file_offset) {
  std::lock_guard lock(Mapped().mutex);
  auto it = Mapped().by_base.upper_bound(at);
  if (it == Mapped().by_base.begin()) return false;
  --it;
  const ShmRegion& region = *it->second;
  const uint64_t into = static_cast<uint64_t>(at - it->first);
  if (into > region.bytes() || len > region.bytes() - into) return false;
  *fd = region.descriptor();
  *file_offset = region.file_offset() + into;
  return true;
}

}  // namespace

bool ShmRegion::ReadMapped(const uint8_t* at, std::span<uint8_t> out) {
  int fd = -1;
  uint64_t offset = 0;
  if (!Locate(at, out.size(), &fd, &offset)) {
    std::memcpy(out.data(), at, out.size());
    return true;
  }
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // an error, or the end of a truncated file
    done += static_cast<size_t>(n);
  }
  return true;
}

namespace {

bool FileCovers(int fd, uint64_t end) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_size >= 0 && static_cast<uint64_t>(st.st_size) >= end;
}

}  // namespace

bool ShmRegion::StillMapsFile(const uint8_t* at, size_t len) {
  int fd = -1;
  uint64_t offset = 0;
  return !Locate(at, len, &fd, &offset) || FileCovers(fd, offset + len);
}

bool ShmRegion::StillMapFiles(std::span<const std::span<const uint8_t>> ranges) {
  // Each region file and the furthest end a range needs of it; a frame's
  // blocks come from one or a few regions, so a short list is enough.
  std::vector<std::pair<int, uint64_t>> needed;
  for (const std::span<const uint8_t> range : ranges) {
    int fd = -1;
    uint64_t offset = 0;
    if (!Locate(range.data(), range.size(), &fd, &offset)) continue;
    const uint64_t end = offset + range.size();
    auto it = std::find_if(needed.begin(), needed.end(), [fd](const auto& entry) { return entry.first == fd; });
    if (it == needed.end()) {
      needed.emplace_back(fd, end);
    } else {
      it->second = std::max(it->second, end);
    }
  }
  return std::all_of(needed.begin(), needed.end(),
                     [](const auto& entry) { return FileCovers(entry.first, entry.second); });
}

bool ShmRegion::WriteMapped(uint8_t* at, std::span<const uint8_t> bytes) {
  int fd = -1;
  uint64_t offset = 0;
  if (!Locate(at, bytes.size(), &fd, &offset)) {
    std::memcpy(at, bytes.data(), bytes.size());
    return true;
  }
  // pwrite past the end would grow a truncated file again; refuse instead.
  // (An engine that truncates between this check and the pwrite gets its
  // file grown back, sparse: its own doing, and no fault for the daemon.)
  if (!FileCovers(fd, offset + bytes.size())) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace kvpeer::daemon
