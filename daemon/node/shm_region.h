// ShmRegion: one engine's block region, mapped into the daemon.
//
// The engine names a file (typically under /dev/shm) or passes a descriptor
// over the control socket; the daemon maps `num_blocks * block_len` bytes of
// it starting at `offset`, MAP_SHARED, so block bytes move between the
// engine's memory and the wire without copies on the daemon's side. The
// mapping is released when the last shared_ptr to the region drops, which is
// how "unmapped once no transfer touches it" holds by construction: pins and
// slot sinks hold the region.
//
// Thread-safety: immutable after mapping but for StillBacked's cache, which
// is atomic (the seal hasher's worker calls it too); the bytes themselves are shared
// with the engine process and are not synchronised by this class.
#pragma once

#include <atomic>
#include <limits>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "daemon/api/api_error.h"
#include "base/unique_fd.h"

namespace kvpeer::daemon {

struct RegionShape {
  uint64_t num_blocks = 0;  // 1 ..= 2^31 (block ids are 0 ..= 2^31 - 1 on the wire)
  uint64_t block_len = 0;   // > 0
  uint64_t offset = 0;      // bytes from the start of the file; any value
};

class ShmRegion {
 public:
  // Opens `path` read-write without following a final symlink and without
  // blocking (O_NOFOLLOW | O_NONBLOCK) and maps it (docs/control-api.md,
  // "5. Regions, access and descriptor passing"). It must be a regular file and, when
  // `owner_uid` is set (always, from the control socket), belong to that
  // uid: the daemon may run with more rights than the engine and must not
  // expose files the engine could not read itself. bad_request when it is
  // not, with one message that does not tell which (nor whether the path
  // exists); bad_request naming the sizes when the file is smaller than
  // offset + num_blocks * block_len or the shape is invalid.
  static Status MapPath(const std::string& path, const RegionShape& shape, std::optional<uint32_t> owner_uid,
                        std::shared_ptr<ShmRegion>* out);
  // Maps an already open descriptor (e.g. received with SCM_RIGHTS); it
  // must be a regular file or memfd. The caller keeps ownership of `fd`;
  // the mapping outlives it.
  static Status MapFd(int fd, const RegionShape& shape, std::shared_ptr<ShmRegion>* out);

  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  uint32_t num_blocks() const { return static_cast<uint32_t>(shape_.num_blocks); }
  uint64_t block_len() const { return shape_.block_len; }
  uint64_t bytes() const { return shape_.num_blocks * shape_.block_len; }
  // The mapped file's descriptor and where block 0 starts in it.
  int descriptor() const { return fd_.get(); }
  uint64_t file_offset() const { return shape_.offset; }

  // Keeps `charge` (e.g. the region's share of --max-region-bytes) as long
  // as the mapping lives.
  void Hold(std::shared_ptr<const void> charge) { charge_ = std::move(charge); }

  // REQUIRES: index < num_blocks().
  std::span<uint8_t> Block(uint32_t index) const;

  // False once the file no longer covers the mapped blocks (the engine
  // truncated it): touching them would raise SIGBUS, and a system call
  // given them fails with EFAULT. Checked with fstat at most once per
  // kRecheckInterval while the file looks whole; a truncated region is
  // never trusted again.
  bool StillBacked() const;

  // Copies mapped bytes through the region's descriptor (pread, pwrite), so
  // a region the engine truncated makes the call fail instead of the daemon
  // taking SIGBUS on a user-space access (used under TLS, where the bytes
  // pass through user space: docs/security.md, "Torn sources and stalled
  // readers"). `at` is an address inside a live region's blocks; memory of
  // no region (tests' heap blocks) is copied directly. False when the file
  // no longer holds every byte asked for: ReadMapped then may have filled
  // part of `out`; WriteMapped writes nothing (it checks the file's size
  // first, so it never grows a truncated file back).
  static bool ReadMapped(const uint8_t* at, std::span<uint8_t> out);
  static bool WriteMapped(uint8_t* at, std::span<const uint8_t> bytes);
  // False when [at, at + len) lies in a live region whose file no longer
  // covers it (fstat now, uncached).
  static bool StillMapsFile(const uint8_t* at, size_t len);
  // The same for every range at once (a data frame's source blocks): one
  // fstat per region file they lie in, not one per block.
  static bool StillMapFiles(std::span<const std::span<const uint8_t>> ranges);

 private:
  ShmRegion(void* mapping, size_t mapping_len, uint8_t* base, RegionShape shape, UniqueFd fd)
      : mapping_(mapping), mapping_len_(mapping_len), base_(base), shape_(shape), fd_(std::move(fd)) {}

  // `what` names the source in error messages ("file '/dev/shm/x'").
  static Status Map(int fd, const std::string& what, const RegionShape& shape, std::shared_ptr<ShmRegion>* out);

  void* mapping_;       // page-aligned start, as returned by mmap
  size_t mapping_len_;  // as passed to mmap
  uint8_t* base_;       // mapping_ + (offset % page size): block 0
  RegionShape shape_;
  std::shared_ptr<const void> charge_;
  UniqueFd fd_;  // a duplicate of the mapped file's descriptor, for StillBacked
  // StillBacked's cache, read and written by the event loop and by the
  // seal hasher's worker at once (relaxed: a stale value only costs one
  // more fstat, or one check too late that the kernel's EFAULT and the
  // SIGBUS guard still cover).
  mutable std::atomic<bool> truncated_{false};
  mutable std::atomic<int64_t> checked_at_ns_{std::numeric_limits<int64_t>::min()};
};

}  // namespace kvpeer::daemon
