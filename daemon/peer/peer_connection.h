// PeerConnection: one TCP connection to one peer node, owning its
// PeerSession and the bytes moving through it.
//
// Reading is zero-copy for block data on plain TCP: after a frame without
// payload one read takes what the socket holds, up to kReadAheadBytes (the
// next frames' prefixes and headers: a burst of control frames costs one
// read, not two a frame); after a frame with payload every read goes
// exactly where the FrameDecoder wants its next bytes (prefix, header, or,
// once a block_data header is accepted, the destination slots the session
// names), so in a stream of data frames payload bytes are never copied in
// user space. Payload bytes that came in a read-ahead with their header (at
// most kReadAheadBytes a frame) are placed through the region's descriptor. Under TLS the payload is
// decrypted into a staging buffer and copied into its slot only a whole
// block (at most BlockStaging::kMaxPieceBytes) at a time. Writing is one FIFO of frames: the
// session's control frames are appended as they are sent, and a data frame is
// pulled from the session only when the FIFO is empty, so a control frame never waits behind more
// than one data frame. A block_data payload is written with scatter/gather
// straight from the source blocks (under TLS: through a bounce buffer read
// with pread, OutgoingFrame), which stay pinned until the frame is written
// and dropped. A source torn under the write (the engine truncated its
// region) is finished with zeros and fails only its round (wire spec
// section 6, "A torn source").
//
// Liveness of the write side (wire spec section 4 step 8): a frame that
// has been waiting for the socket to accept a byte for the liveness
// timeout means the peer stopped reading; the connection is closed and its
// work fails, so such a peer holds no pins or store jobs.
//
// Closing: the socket is closed before the session fails its work, so no
// byte can land in a slot after its load's result has been reported.
//
// Lifecycle: one PeerPhase (daemon/peer/peer_phase.h) says where the connection
// is (resolving, connecting, TLS handshake, running, lingering, closed);
// every step goes through its checked transition table.
//
// Thread-safety: everything runs on the daemon's one io_context.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/peer/block_staging.h"
#include "daemon/node/connection_stats.h"
#include "daemon/peer/peer_phase.h"
#include "daemon/peer/peer_resolver.h"
#include "daemon/peer/peer_stream.h"
#include "daemon/peer/send_low_water.h"
#include "protocol/frame_decoder.h"
#include "protocol/messages.h"
#include "session/peer_session.h"

namespace kvpeer::daemon {

class OutgoingFrame;
class PeerConnection;

// What the connection tells its owner (the PeerManager).
class ConnectionListener {
 public:
  virtual ~ConnectionListener() = default;
  // The session may have results, a new handshake state or a new peer
  // identity; called after every batch of session activity. `session` is
  // the connection's, open to the owner's reactions (taking the results,
  // binding supply): this call is the after-step of that activity.
  virtual void OnSessionActivity(PeerConnection& connection, session::PeerSession& session) = 0;
  // The connection is closed for good; called exactly once, after the final
  // OnSessionActivity that carries the failed work.
  virtual void OnConnectionClosed(PeerConnection& connection) = 0;
  // A lookup_resp arrived `round_trip` after the lookup it answers was sent
  // (the lookups of one connection are answered in order).
  virtual void OnLookupAnswered(session::Duration round_trip) { (void)round_trip; }
  // The session has taken a lookup_resp (every one, split answers
  // included), so probe answers of this peer may have changed.
  virtual void OnLookupResp(PeerConnection& connection) { (void)connection; }
  // A limit refused or paused work on this connection: `limit` is the
  // option ("max-rounds-per-peer", "max-queued-bytes"), `count` the hits,
  // `detail` what happened, for the log.
  virtual void OnLimitHit(PeerConnection& connection, std::string_view limit, uint64_t count,
                          const std::string& detail) {
    (void)connection, (void)limit, (void)count, (void)detail;
  }
};

class PeerConnection : public std::enable_shared_from_this<PeerConnection> {
 public:
  // `expected_peer_id` is the dialled peer, empty for an accepted socket.
  // `stream` is a TCP socket, or one wrapped for TLS (the TLS handshake
  // runs first, within the session's handshake deadline).
  PeerConnection(PeerStream stream, session::SessionConfig config, session::PublishedBlocks& index,
                 std::string expected_peer_id, ConnectionListener& listener);
  ~PeerConnection();

  // Accepted socket: starts the session and the I/O loops.
  void StartAccepted();
  // Dials `host:port` of the expected peer; the session starts at once so
  // work can queue while the dial is in progress. `resolver` looks the
  // host up (an IP literal at once); the handshake deadline runs from the
  // TCP connect, not from the lookup, which has its own timeout and is taken
  // back when the connection closes first. A dial that fails closes the
  // connection with a reason naming the address and the error.
  void StartDial(const std::string& host, const std::string& port, PeerResolver& resolver);

  // Ends the session for `cause` (its work fails with `reason`) after
  // stopping every read into a slot, then closes gracefully:
  // disconnect{reason} when `notify_peer`, after any frame being written,
  // then FIN (see Linger).
  void Close(session::CloseCause cause, const std::string& reason, bool notify_peer = true,
             session::JobFailure failure = session::JobFailure::kSessionClosed);

  // Operates on the session from outside (engine ops): runs `operation` on
  // it, then the after-step that wakes the writer and reports results, and
  // returns what `operation` returned. The only way for the owner to change
  // the session outside OnSessionActivity, so the after-step cannot be
  // forgotten.
  template <typename Operation>
  std::invoke_result_t<Operation, session::PeerSession&> WithSession(Operation&& operation) {
    if constexpr (std::is_void_v<std::invoke_result_t<Operation, session::PeerSession&>>) {
      std::forward<Operation>(operation)(*session_);
      AfterSessionActivity();
    } else {
      auto result = std::forward<Operation>(operation)(*session_);
      AfterSessionActivity();
      return result;
    }
  }

  // --max-queued-bytes: while more than this many bytes wait in the write
  // queue the connection stops reading from the peer (backpressure), and
  // reads again once half of them are written. 0 = no limit. The bytes
  // counted are the encoded prefixes and headers waiting to be written: a
  // block_data payload is gathered from its pinned source slots, never
  // copied, and at most one data frame is queued at a time (data frames are
  // pulled only when the queue is empty). The queue can exceed the limit by
  // the answers to one read (at most 64 KiB of frames, plus the one frame
  // that read completes) and by engine-originated frames.
  void set_max_queued_bytes(uint64_t max_queued_bytes) { max_queued_bytes_ = max_queued_bytes; }
  // Bytes waiting in the write queue now, and the most ever.
  uint64_t queued_bytes() const { return queued_bytes_; }
  uint64_t queued_bytes_peak() const { return queued_bytes_peak_; }

  // Read-only: changes go through WithSession.
  const session::PeerSession& session() const { return *session_; }
  // The session is over (the socket may still linger for the disconnect).
  bool closed() const { return phase_.session_over(); }
  bool dialled() const { return dialled_; }
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  std::string remote_address() const;
  const ConnectionStats& stats() const { return stats_; }
  size_t write_queue_depth() const { return write_queue_.size(); }
  // For classifying the close (with session().close_cause()): the session
  // was ready at some point; this node found a protocol violation by the
  // peer (a label such as "malformed_frame", "before_handshake" or
  // "bad_fetch", from the close cause); the owner closed the connection
  // through Close().
  bool ever_ready() const { return ever_ready_; }
  const std::optional<std::string>& violation() const { return violation_; }
  bool closed_by_owner() const { return closed_by_owner_; }

 private:
  // A frame and its encoded prefix and header, made when it is queued so
  // the queue's bytes are known.
  struct QueuedFrame {
    session::OutFrame frame;
    std::string head;
    // Bytes of `head` already on the wire (control frames only: a direct
    // write the socket took part of; the writer finishes the frame).
    size_t written = 0;
  };
  // Control frames written by one gathered write at most (Asio passes at
  // most 64 buffers to one sendmsg).
  static constexpr size_t kMaxGatheredFrames = 64;
  // The writer's batch leaves the queue's byte count when it starts, so it
  // takes at most this many bytes (or one frame): what the writer holds
  // beyond max_queued_bytes_ stays about what one frame was before batches.
  static constexpr size_t kMaxGatheredBytes = 64 * 1024;
  // One read between payloads (plain TCP) takes at most this many bytes.
  static constexpr size_t kReadAheadBytes = 8 * 1024;

  // The session's identity check under TLS (session::IdentityCheck).
  Status CheckIdentity(const std::string& peer_id) const;
  boost::asio::awaitable<void> ReadLoop();
  // Under TLS, `n` payload bytes arrived in staging_; a whole piece is
  // placed into its slot through the region's descriptor, and when that
  // slot's file no longer holds it the load fails and the frame is dropped.
  void OnStagedBytes(size_t n);
  // Plain TCP: `bytes` arrived between payloads; false once the connection
  // must stop reading.
  bool FeedReadAhead(std::span<const uint8_t> bytes);
  // Payload bytes of the read-ahead into the current slot; how many.
  size_t PlaceReadAhead(std::span<const uint8_t> bytes);
  boost::asio::awaitable<void> WriteLoop();
  // Writes the data frame at the front of the queue, then counts it.
  boost::asio::awaitable<void> WriteDataFrame(boost::system::error_code& ec);
  // Writes one frame piece by piece, noting each byte the socket accepts.
  // True when the frame's source was torn (it went out padded with zeros).
  boost::asio::awaitable<bool> WriteFrame(const QueuedFrame& queued, boost::system::error_code& ec);
  // Writes the control frames at the front of the queue (at most
  // kMaxGatheredFrames) with one gathered write each time the socket takes
  // bytes; while lingering only the frame the socket already took part of.
  boost::asio::awaitable<void> WriteControlFrames(boost::system::error_code& ec);
  // Plain TCP, the writer idle: the control frames at the front of the
  // queue go out now, without a hop through the writer (see Enqueue).
  void WriteControlFramesNow();
  // Posts one WriteControlFramesNow for the end of this turn of the io_context.
  void FlushControlFramesLater();
  bool MayWriteControlFramesNow() const;
  // `n` more bytes of `queued`'s head are on the wire; true when it is whole
  // (then it is counted as sent).
  bool HeadWritten(QueuedFrame& queued, size_t& n);
  // The frame at the front of the queue is partly on the wire: nothing may
  // be written before it is finished.
  bool FrontHalfWritten() const { return !write_queue_.empty() && write_queue_.front().written > 0; }
  void OnFrameNotServed(const protocol::BlockData& data, std::string_view why);
  static bool SealsHeld(const std::vector<session::PinRef>& blocks);
  // The write-progress liveness check (wire spec section 4 step 8).
  bool WriterStalled() const;
  // A frame already started is finished even while the connection lingers
  // (a graceful close: the disconnect must follow a whole frame).
  bool MayWriteOn() const { return !phase_.closed(); }
  boost::asio::awaitable<void> TickLoop();
  void OnResolved(const std::string& host, const std::string& port, ResolveOutcome outcome);
  boost::asio::awaitable<void> Dial(std::string host, std::string port,
                                    std::vector<boost::asio::ip::tcp::endpoint> endpoints);
  // Enters kRunning and starts the reader and the writer.
  void StartLoops();
  void StartTickLoop();
  // Accepted TLS connection: the TLS handshake, then the loops.
  boost::asio::awaitable<void> AcceptTls();
  // The session is over and its socket is closed for good.
  void EnterClosed();

  // Acts on the decoder's state after bytes arrived; false once the
  // connection must stop reading.
  bool ProcessDecoderState();
  bool OnHeaderReady();
  void OnFrameReady();
  void Enqueue(session::OutFrame frame);
  // Backpressure: waits while the write queue is over max_queued_bytes_.
  boost::asio::awaitable<void> WaitForQueueToDrain();
  void AfterSessionActivity();
  void DivertAbandonedFrame();
  void ReadBytesBelowLowWater();
  void CloseSocketAndSession(session::CloseCause cause, const std::string& reason);
  void TrySendDisconnectNow();
  // Keeps the socket of a closed connection open (at most kMaxLinger) until
  // the frame being written is out, then sends the disconnect and a FIN and
  // drops what the peer still sends until it closes too.
  void Linger();
  void SendDisconnectAndFin();
  boost::asio::awaitable<void> DiscardUntilPeerCloses();
  void EndLinger();
  // Counts a frame the session sent and starts a lookup's round-trip clock.
  void CountSent(const protocol::Message& message);
  void CountReceived(const protocol::Message& message);
  // After the session closed on `message` (nullptr: a frame the decoder
  // refused): the violation's label, when the close cause is one.
  void NoteViolation(const protocol::Message* message);
  // Keeps the socket's unsent-bytes bound in step with the frames queued.
  void NoteQueued(const session::OutFrame& frame);

  PeerStream stream_;
  boost::asio::ip::tcp::socket& socket_;  // stream_'s TCP socket
  session::PublishedBlocks& index_;
  ConnectionListener& listener_;
  std::unique_ptr<session::PeerSession> session_;
  protocol::FrameDecoder decoder_;
  std::deque<QueuedFrame> write_queue_;
  // The writer's batch of control frames being written (reused).
  std::vector<QueuedFrame> control_batch_;
  std::vector<boost::asio::const_buffer> gathered_;      // their buffers (reused)
  std::vector<boost::asio::const_buffer> gathered_now_;  // WriteControlFramesNow's (reused)
  // A flush of the control frames queued during this turn of the
  // io_context is posted (see Enqueue).
  bool flush_posted_ = false;
  SendLowWater send_low_water_;
  uint64_t queued_bytes_ = 0;  // sum of the queued heads
  uint64_t queued_bytes_peak_ = 0;
  uint64_t max_queued_bytes_ = 0;
  // Where the connection is in its life. The flags below are not phases
  // but facts within one: which way it was made (dialled_), backpressure
  // (reading_paused_), what the one reader and one writer are doing now
  // (write_in_progress_, reading_into_slot_, read_diverted_), whether the
  // owner heard of the close (close_reported_: the close is reported once,
  // though the listener may close the connection again from within its
  // callback), and what classifies the close (ever_ready_,
  // closed_by_owner_, violation_).
  PeerPhaseTracker phase_;
  bool reading_paused_ = false;
  boost::asio::steady_timer reader_wake_;  // cancelled when the queue has drained
  boost::asio::steady_timer writer_wake_;
  boost::asio::steady_timer tick_timer_;
  bool dialled_ = false;
  // The dialled host's lookup while it runs; dropped on close, which
  // takes it back (its callback holds no reference to this connection).
  std::unique_ptr<PeerResolver::Lookup> lookup_;
  bool write_in_progress_ = false;
  bool reading_into_slot_ = false;                // the pending read targets a block slot
  boost::asio::cancellation_signal read_cancel_;  // takes back the pending read
  bool read_diverted_ = false;                    // ... and did
  std::chrono::steady_clock::time_point last_read_at_{};
  // The last time the socket accepted bytes of the frame being written (or
  // that frame's start); see WriterStalled.
  std::chrono::steady_clock::time_point last_write_progress_{};
  session::Duration liveness_timeout_;
  // TLS only: block payload between a region and the socket, at most
  // OutgoingFrame::kBounceBytes; and from the socket to a slot, a whole
  // piece at a time (BlockStaging, at most kMaxPieceBytes).
  std::vector<uint8_t> bounce_out_;
  BlockStaging staging_;
  std::array<uint8_t, kReadAheadBytes> read_ahead_{};
  bool last_frame_had_payload_ = false;  // the next read is exact (ReadLoop)
  bool close_reported_ = false;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  ConnectionStats stats_;
  // Lookups sent and not answered yet: round and send time, oldest first.
  std::deque<std::pair<protocol::RoundSeq, std::chrono::steady_clock::time_point>> lookups_awaiting_;
  std::string remote_;  // "address:port", captured while the socket is open
  bool ever_ready_ = false;
  bool closed_by_owner_ = false;
  std::optional<std::string> violation_;
};

}  // namespace kvpeer::daemon
