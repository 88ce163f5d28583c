// PeerWriter: the write side of one PeerConnection, in the shape of Asio's
// C++20 chat server: frames are queued (Enqueue), one writer coroutine
// (Run) writes them, parked on a timer that queueing cancels.
//
// One write path. Every byte leaves from the front of the one WriteQueue
// (daemon/peer/write_queue.h), in queue order, and is counted by the same
// WriteQueue::ConsumeFront or by the coroutine on its frame. The coroutine
// writes everything that may have to wait for the socket; WriteFrontNow is
// its synchronous front end for control frames when the coroutine is parked
// (never while it has a frame in flight), used for two things:
//   * Issue 14 items 1 and 2: the first control frame queued in a turn of
//     the io_context goes on the wire at once, not one turn later through
//     the coroutine (an idle lookup's round trip); frames queued after it in
//     the same turn (a burst of lookups or answers) go together at the end
//     of the turn (one posted WriteFrontNow), one gathered write for many.
//     Plain TCP only: a TLS record the socket took part of would be lost by
//     a write that does not wait, so under TLS the coroutine writes all.
//   * The last words: the disconnect right before the socket closes, best
//     effort, when no frame is half-written (a disconnect spliced into
//     another frame would corrupt the stream). Under TLS too: a record cut
//     short is harmless when the connection closes next.
// Order holds because WriteFrontNow only runs while nothing is in flight and
// writes the queue's front; what the socket does not take stays at the
// front (a frame it took part of is finished first), and the coroutine,
// woken, continues from there.
//
// Liveness of the write side (wire spec section 4 step 8): a frame that has
// been waiting for the socket to accept a byte for the liveness timeout
// means the peer stopped reading (Stalled).
//
// Thread-safety: none; the connection's io_context thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/peer/send_low_water.h"
#include "daemon/peer/write_queue.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

class PeerConnection;
class PeerStream;

class PeerWriter {
 public:
  PeerWriter(PeerConnection& connection, PeerStream& stream);

  // Queues `frame` and has it written (see the header comment).
  void Enqueue(session::OutFrame frame);
  // The writer coroutine: runs from kRunning until the session is over (a
  // lingering connection still finishes the frame the socket took part of,
  // then sends the disconnect and the FIN).
  boost::asio::awaitable<void> Run();
  // After session activity: the coroutine looks at the queue and the
  // session's data again. Control frames a posted flush will gather need no
  // coroutine.
  void WakeForActivity(bool session_has_data);
  void Wake() { wake_.cancel(); }

  // The session is over: only a frame the socket took part of and the
  // disconnect stay queued.
  void KeepOnlyLastWords() { queue_.KeepForLinger(); }
  // Nothing in flight and no frame half-written: the disconnect may go now.
  bool MaySendLastWords() const { return !write_in_progress_ && !queue_.front_half_written(); }
  // Writes the queued disconnect now, best effort (see the header comment).
  void SendLastWords();
  void DropAll() { queue_.Clear(); }

  // The write-progress liveness check against `liveness_timeout`.
  bool Stalled(std::chrono::steady_clock::duration liveness_timeout) const;
  // Frames wait or are being written.
  bool busy() const { return write_in_progress_ || !queue_.empty(); }
  const WriteQueue& queue() const { return queue_; }
  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  // Plain TCP, running, the coroutine parked, a control frame at the front.
  bool MayWriteFrontNow() const;
  // The synchronous front end: control frames at the front of the queue, as
  // much as the socket takes now. `last_words`: only the front frame, also
  // under TLS, the connection closes next.
  void WriteFrontNow(bool last_words);
  void FlushLater();
  // Writes the data frame at the front of the queue, then counts it.
  boost::asio::awaitable<void> WriteDataFrame(boost::system::error_code& ec);
  // Writes one data frame piece by piece, noting each byte the socket
  // accepts. True when its source held (not torn, seals still held).
  boost::asio::awaitable<bool> WriteFrame(const QueuedFrame& queued, boost::system::error_code& ec);
  // Writes a batch of control frames taken from the queue's front with one
  // gathered write each time the socket takes bytes.
  boost::asio::awaitable<void> WriteControlFrames(boost::system::error_code& ec);
  void OnFrameNotServed(const protocol::BlockData& data, std::string_view why);
  // The queue shrank: the reader may resume (backpressure).
  void Dequeued();
  void NoteQueued(const session::OutFrame& frame);
  void Progress(size_t n);

  PeerConnection& connection_;
  PeerStream& stream_;
  WriteQueue queue_;
  boost::asio::steady_timer wake_;  // the coroutine parks here; queueing cancels it
  // The coroutine's batch of control frames being written; their buffers;
  // WriteFrontNow's buffers (all reused).
  std::vector<QueuedFrame> batch_;
  std::vector<boost::asio::const_buffer> gathered_;
  std::vector<boost::asio::const_buffer> gathered_now_;
  // TLS only: block payload between a region and the socket, at most
  // OutgoingFrame::kBounceBytes.
  std::vector<uint8_t> bounce_out_;
  SendLowWater send_low_water_;
  bool write_in_progress_ = false;  // the coroutine has bytes in flight
  bool flush_posted_ = false;       // a WriteFrontNow is posted for the end of this turn
  // The last time the socket accepted bytes of the frame being written (or
  // that frame's start); see Stalled.
  std::chrono::steady_clock::time_point last_progress_{};
  uint64_t bytes_sent_ = 0;
};

}  // namespace kvpeer::daemon
