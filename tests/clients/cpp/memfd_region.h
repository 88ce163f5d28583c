// An engine's block region for the client's tests: a memfd mapped here,
// passed to the daemon by descriptor. Blocks hold a pattern of a seed, so a
// destination block can be checked against its source.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace kvpeer::test {

class MemfdRegion {
 public:
  MemfdRegion(uint64_t num_blocks, uint64_t block_len) : num_blocks_(num_blocks), block_len_(block_len) {
    fd_ = ::memfd_create("kvpeer-client-test", MFD_CLOEXEC);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(bytes())) != 0) throw std::runtime_error("memfd");
    void* base = ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) throw std::runtime_error("mmap");
    base_ = static_cast<uint8_t*>(base);
  }
  ~MemfdRegion() {
    ::munmap(base_, bytes());
    ::close(fd_);
  }
  MemfdRegion(const MemfdRegion&) = delete;
  MemfdRegion& operator=(const MemfdRegion&) = delete;

  int fd() const { return fd_; }
  uint64_t num_blocks() const { return num_blocks_; }
  uint64_t bytes() const { return num_blocks_ * block_len_; }

  void Fill(uint64_t block, uint64_t seed) {
    for (uint64_t i = 0; i < block_len_; ++i) base_[block * block_len_ + i] = Byte(seed, i);
  }
  bool Holds(uint64_t block, uint64_t seed) const {
    for (uint64_t i = 0; i < block_len_; ++i) {
      if (base_[block * block_len_ + i] != Byte(seed, i)) return false;
    }
    return true;
  }

 private:
  static uint8_t Byte(uint64_t seed, uint64_t i) {
    return static_cast<uint8_t>((seed * 131 + i * 7 + (i >> 8)) & 0xff);
  }

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t num_blocks_;
  uint64_t block_len_;
};

}  // namespace kvpeer::test
