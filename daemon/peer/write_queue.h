// WriteQueue: the frames one PeerConnection has to write, in order, with
// the byte count backpressure and the metrics read (--max-queued-bytes) and
// the decisions about what goes next. Pure: no socket, no Asio I/O (only
// its buffer type), driven by the writer (daemon/peer/peer_writer.h) and by
// tests with plain calls.
//
// Order: frames leave in the order they were queued, except that a frame
// the socket took part of (`written` > 0) is always finished before any
// other byte: a frame spliced into another would corrupt the stream.
// Priority: a block_data frame is pulled from the session only when this
// queue is empty (the writer asks), so a control frame never waits behind
// more than one data frame.
//
// Thread-safety: none; one connection's io_context thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/buffer.hpp>

#include "protocol/messages.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

// A frame and its encoded prefix and header, made when it is queued so the
// queue's bytes are known.
struct QueuedFrame {
  session::OutFrame frame;
  std::string head;
  // Bytes of `head` already on the wire (control frames only: a write the
  // socket took part of; the rest must follow before anything else).
  size_t written = 0;
  bool is_data() const { return std::holds_alternative<protocol::BlockData>(frame.message); }
};

class WriteQueue {
 public:
  // Control frames written by one gathered write at most (Asio passes at
  // most 64 buffers to one sendmsg).
  static constexpr size_t kMaxGatheredFrames = 64;
  // A batch leaves the queue's byte count when it is taken, so it holds at
  // most this many bytes (or one frame): what the writer holds beyond
  // --max-queued-bytes stays about one frame.
  static constexpr size_t kMaxBatchBytes = 64 * 1024;

  // Encodes `frame`'s prefix and header and appends it.
  void Push(session::OutFrame frame);
  bool empty() const { return frames_.empty(); }
  size_t size() const { return frames_.size(); }
  // Sum of the queued heads, and the most ever.
  uint64_t bytes() const { return bytes_; }
  uint64_t bytes_peak() const { return bytes_peak_; }
  bool front_is_data() const { return !frames_.empty() && frames_.front().is_data(); }
  // The front frame is partly on the wire: nothing may be written before it.
  bool front_half_written() const { return !frames_.empty() && frames_.front().written > 0; }

  // Takes the data frame at the front (REQUIRES: front_is_data()).
  QueuedFrame PopData();
  // Moves the control frames at the front into `batch` (cleared first): at
  // most kMaxGatheredFrames and kMaxBatchBytes (at least one frame). While
  // the session is over (`session_over`) only a frame already begun is
  // taken: the rest are dropped with the session.
  void TakeControlBatch(std::vector<QueuedFrame>& batch, bool session_over);
  // The unwritten bytes of the control frames at the front, at most
  // kMaxGatheredFrames, into `buffers` (cleared first).
  void GatherControlFront(std::vector<boost::asio::const_buffer>& buffers) const;
  // `n` more bytes of the front frames are on the wire: frames now whole
  // leave the queue, each passed to `sent` first.
  void ConsumeFront(size_t n, const std::function<void(const QueuedFrame&)>& sent);

  // The session is over: only a frame the socket took part of and the
  // disconnect stay; the other frames (and their pins) go now.
  void KeepForLinger();
  void Clear();
  // A transfer_done{success:true} not yet begun for this round becomes a
  // failure (its round turned out not served); true when one did.
  bool FailTransferDone(const std::string& kv_request_id, protocol::RoundSeq round_seq);

 private:
  void Recount();

  std::deque<QueuedFrame> frames_;
  uint64_t bytes_ = 0;
  uint64_t bytes_peak_ = 0;
};

// `n` more bytes of `queued`'s head are on the wire (n is reduced by what
// this frame took); true when the head is now whole.
bool HeadWritten(QueuedFrame& queued, size_t& n);

}  // namespace kvpeer::daemon
