// BlockStaging: where a block_data payload received over TLS waits until a
// whole piece of it has arrived, before it is copied into its slot.
//
// Over TLS the payload is decrypted in user space, so it cannot go straight
// into the slot the way plain TCP's kernel copy does. Bytes are gathered
// here, one piece at a time: a piece is the start of the decoder's current
// target (one destination block; a block longer than kMaxPieceBytes is
// staged in pieces of that size). Only a whole piece is copied into the
// slot, through the region's descriptor (ShmRegion::WriteMapped), so
//   * a trickling peer (one byte per TLS record) never gets a partial block
//     into a slot, and costs one copy per piece, not one per record;
//   * a load that ends while its piece is half here (timeout, `finish`)
//     drops the piece: the bytes already read and any read still in flight
//     are discarded, so nothing lands in its slots after its result (the
//     same guarantee as plain TCP, wire-protocol.md section 5, "the write
//     guard"; docs/architecture.md "Receiving under TLS").
//
// Bounded in bytes: the buffer never exceeds kMaxPieceBytes per connection.
//
// Pure bookkeeping over a buffer: the caller (PeerConnection) reads into
// Room(), reports what arrived with Add(), and copies Bytes() into
// Destination() when Add() says the piece is whole.
//
// Thread-safety: none; used by one connection's reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvpeer::daemon {

class BlockStaging {
 public:
  // The most payload staged at a time: a block up to this size is staged
  // whole, a longer one in pieces of this size.
  static constexpr size_t kMaxPieceBytes = 4 * 1024 * 1024;

  enum class Arrival {
    kPartial,    // the piece still owes bytes: nothing to copy yet
    kWhole,      // the piece is complete: copy Bytes() into Destination()
    kDiscarded,  // the read was for a dropped piece: its bytes go nowhere
  };

  // Where the next read goes: the rest of the piece at the start of
  // `target` (the decoder's WritableSpan, not committed while the piece is
  // staged). A new piece starts when none is staged or `target` is not the
  // staged piece's. REQUIRES: !target.empty().
  std::span<uint8_t> Room(std::span<uint8_t> target);
  // `n` bytes arrived in the last Room(). REQUIRES: n <= Room().size().
  Arrival Add(size_t n);
  // After kWhole: the slot bytes the piece fills, and its bytes. The caller
  // copies them, commits Destination().size() to the decoder and calls
  // Clear().
  std::span<uint8_t> Destination() const { return destination_; }
  std::span<const uint8_t> Bytes() const { return std::span<const uint8_t>(buffer_).first(filled_); }
  void Clear();
  // The piece's frame was abandoned: returns how many of its bytes were
  // read (the decoder counts them as read and dropped). A read still in
  // flight into Room() completes as kDiscarded. The buffer is kept, since
  // such a read may still be writing into it.
  size_t Drop();

  bool staging() const { return state_ == State::kStaging; }
  // Bytes held for this connection (capacity of the buffer).
  size_t buffer_bytes() const { return buffer_.capacity(); }

 private:
  enum class State { kIdle, kStaging, kDropped };

  State state_ = State::kIdle;
  std::span<uint8_t> destination_;
  std::vector<uint8_t> buffer_;
  size_t filled_ = 0;
};

}  // namespace kvpeer::daemon
