// PeerReader: the read side of one PeerConnection: one reader coroutine
// (Run) that reads the socket, feeds the frame decoder and hands each frame
// to the session.
//
// Reading is zero-copy for block data on plain TCP: after a frame without
// payload one read takes what the socket holds, up to kReadAheadBytes (the
// next frames' prefixes and headers: a burst of control frames costs one
// read, not two a frame); after a frame with payload every read goes
// exactly where the FrameDecoder wants its next bytes (prefix, header, or,
// once a block_data header is accepted, the destination slots the session
// names: one vectored read fills as many of the frame's slots as have
// arrived), so in a stream of data frames payload bytes are never copied in
// user space. Payload bytes that came in a read-ahead with their header (at
// most kReadAheadBytes a frame) are placed through the region's descriptor.
// Under TLS the payload is decrypted into a staging buffer and copied into
// its slot only a whole block (at most BlockStaging::kMaxPieceBytes) at a
// time. Which of these a read does is its ReadTarget (daemon/peer/read_target.h).
//
// Backpressure (--max-queued-bytes): while more bytes wait in the write
// queue than the limit, the reader stops reading, and reads again once half
// of them are written (the writer reports each shrink: OnQueueShrunk).
//
// Thread-safety: none; the connection's io_context thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/peer/block_staging.h"
#include "daemon/peer/read_target.h"
#include "protocol/frame_decoder.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

class PeerConnection;
class PeerStream;

class PeerReader {
 public:
  // One read between payloads (plain TCP) takes at most this many bytes.
  static constexpr size_t kReadAheadBytes = 8 * 1024;
  // One payload read fills at most this many destination slots (Asio's own
  // limit on the buffers of one vectored read).
  static constexpr size_t kMaxReadSpans = 64;

  PeerReader(PeerConnection& connection, PeerStream& stream, uint64_t block_len);

  // The reader coroutine: runs from kRunning until the session is over; a
  // lingering connection then reads and drops what the peer still sends
  // until it closes too.
  boost::asio::awaitable<void> Run();

  // 0 = no limit (see the header comment).
  void set_max_queued_bytes(uint64_t max_queued_bytes) { max_queued_bytes_ = max_queued_bytes; }
  // The write queue holds `queued_bytes` now: a paused reader resumes at half the limit.
  void OnQueueShrunk(uint64_t queued_bytes);
  // Wakes a reader paused by backpressure (the session is over).
  void Wake() { wake_.cancel(); }
  // A load ended while its frame's payload was arriving: the rest of the
  // payload is read and dropped, and a pending read into its slot is taken back.
  void DivertAbandonedFrame();
  // Bytes below the socket's low-water mark are taken after a while (TickLoop).
  void ReadBytesBelowLowWater();
  // The pending read targets a block slot: only closing the socket stops it.
  bool reading_into_slot() const { return in_flight_ == ReadTarget::kSlot; }
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  // What one read led to.
  enum class Step : uint8_t {
    kDecode,  // bytes reached the decoder: act on its state
    kAgain,   // read again (the bytes were handled, or the read was taken back)
    kStop,    // the session is over: stop reading (a lingering socket is drained)
    kEnded,   // the connection was closed for good
  };
  boost::asio::awaitable<Step> ReadOnce();
  // The buffers the next read of `target` fills (valid until the next call).
  std::span<const boost::asio::mutable_buffer> ReadBuffers(ReadTarget target);
  // Backpressure: waits while the write queue is over the limit.
  boost::asio::awaitable<void> WaitForQueueToDrain();
  boost::asio::awaitable<void> DiscardUntilPeerCloses();
  // Under TLS, `n` payload bytes arrived in staging_; a whole piece is
  // placed into its slot through the region's descriptor, and when that
  // slot's file no longer holds it the load fails and the frame is dropped.
  void OnStagedBytes(size_t n);
  // Plain TCP: `bytes` arrived between payloads; false once the connection
  // must stop reading.
  bool FeedReadAhead(std::span<const uint8_t> bytes);
  // Payload bytes of the read-ahead into the current slot; how many.
  size_t PlaceReadAhead(std::span<const uint8_t> bytes);
  // Acts on the decoder's state after bytes arrived; false once the
  // connection must stop reading.
  bool ProcessDecoderState();
  bool OnHeaderReady();
  void OnFrameReady();
  // Before a frame's prefix is read: the session's limits for it.
  void SetLimitsForNextFrame();

  PeerConnection& connection_;
  PeerStream& stream_;
  protocol::FrameDecoder decoder_;
  BlockStaging staging_;  // TLS only: from the socket to a slot, a whole piece at a time
  std::array<uint8_t, kReadAheadBytes> read_ahead_{};
  std::vector<std::span<uint8_t>> read_spans_;                             // the next read's targets, reused
  std::array<boost::asio::mutable_buffer, kMaxReadSpans> read_buffers_{};  // the same, for the socket
  boost::asio::steady_timer wake_;                // backpressure: cancelled when the queue has drained
  boost::asio::cancellation_signal read_cancel_;  // takes back the pending read
  ReadTarget in_flight_ = ReadTarget::kNone;      // the pending read's target
  bool read_diverted_ = false;                    // the pending read was taken back
  bool last_frame_had_payload_ = false;           // the next read is exact (ChooseReadTarget)
  bool paused_ = false;                           // backpressure holds the reader
  uint64_t max_queued_bytes_ = 0;
  uint64_t bytes_received_ = 0;
  std::chrono::steady_clock::time_point last_read_at_{};
};

}  // namespace kvpeer::daemon
