// OutgoingFrame: the bytes of one queued frame (encoded prefix and header,
// then a block_data payload read from its pinned source blocks), handed to
// the socket piece by piece so the writer sees every bit of progress (wire
// spec section 4 step 8: write-progress liveness) and can survive a torn
// source (section 6, "A torn source").
//
// Plain TCP: the payload is gathered straight from the source mappings; the
// kernel copies it, and a block whose file the engine truncated makes the
// write fail with EFAULT, never the daemon fault. TLS: the payload must be
// encrypted in user space, so it is first read through the region's file
// descriptor (ShmRegion::ReadMapped, pread) into a bounded bounce buffer; a
// short read is the same tear. Either way, once torn, the rest of the frame
// is zeros: the stream stays well formed and only the round fails.
//
// Thread-safety: none; used by one connection's writer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/asio/buffer.hpp>

#include "session/session_types.h"

namespace kvpeer::daemon {

class OutgoingFrame {
 public:
  // Bytes of source payload read into the bounce buffer at a time (TLS).
  static constexpr size_t kBounceBytes = 256 * 1024;

  // `head` and `blocks` must outlive this object. `bounce` is the
  // connection's buffer (TLS only; null for plain TCP), grown to at most
  // kBounceBytes.
  OutgoingFrame(const std::string& head, const std::vector<session::PinRef>& blocks, std::vector<uint8_t>* bounce);

  bool done() const { return offset_ == total_; }
  // What to write next; non-empty unless done().
  const std::vector<boost::asio::const_buffer>& Next();
  // `n` bytes of Next() were accepted by the socket.
  void Consumed(size_t n);
  // The source could not be read at the current position (EFAULT): from
  // here on the payload is zeros. False when the position is still in the
  // head, which no source can tear (the frame cannot be saved then).
  bool TearHere();
  // Plain TCP only: a truncation during the write may have sent zeros the
  // kernel read from a partly backed page without faulting; true (and
  // torn()) when a block's file no longer covers it. Call once done().
  bool CheckSourcesAfterWrite();
  bool torn() const { return torn_; }
  uint64_t payload_offset() const { return offset_ > head_.size() ? offset_ - head_.size() : 0; }

 private:
  void NextPlain();
  void NextBounced();
  void NextZeros();

  const std::string& head_;
  const std::vector<session::PinRef>& blocks_;
  std::vector<uint8_t>* bounce_;
  uint64_t total_ = 0;
  uint64_t offset_ = 0;  // bytes of head + payload accepted so far
  bool torn_ = false;
  size_t bounce_begin_ = 0, bounce_end_ = 0;  // unwritten bytes held in *bounce_
  std::vector<boost::asio::const_buffer> next_;
};

}  // namespace kvpeer::daemon
