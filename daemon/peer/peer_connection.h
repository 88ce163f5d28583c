// PeerConnection: one TCP connection to one peer node, owning its
// PeerSession and the bytes moving through it, in the shape of Asio's C++20
// chat server: one reader coroutine (PeerReader, daemon/peer/peer_reader.h),
// one writer coroutine fed by one queue (PeerWriter, daemon/peer/peer_writer.h),
// a tick timer, and this class: the lifecycle that starts them, runs the
// session's after-step (AfterSessionActivity) and stops everything in one
// place (Stop and the close paths below).
//
// Writing is one FIFO of frames: the session's control frames are appended
// as they are sent, and a data frame is pulled from the session only when
// the FIFO is empty, so a control frame never waits behind more than one
// data frame. A block_data payload is written with scatter/gather straight
// from the source blocks (under TLS: through a bounce buffer read with
// pread, OutgoingFrame), which stay pinned until the frame is written and
// dropped. A source torn under the write (the engine truncated its region)
// is finished with zeros and fails only its round (wire spec section 6, "A
// torn source").
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
// every step goes through its checked transition table. "Over" names the
// session (session_over(): lingering or closed), "socket closed" the socket
// (PeerPhaseTracker::socket_closed()).
//
// Thread-safety: everything runs on the daemon's one io_context.
#pragma once

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
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/status_or.h"
#include "daemon/node/connection_stats.h"
#include "daemon/peer/peer_phase.h"
#include "daemon/peer/peer_reader.h"
#include "daemon/peer/peer_resolver.h"
#include "daemon/peer/peer_stream.h"
#include "daemon/peer/peer_writer.h"
#include "protocol/messages.h"
#include "session/peer_session.h"

namespace kvpeer::daemon {

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
  void set_max_queued_bytes(uint64_t max_queued_bytes) { reader_.set_max_queued_bytes(max_queued_bytes); }
  // Bytes waiting in the write queue now, and the most ever.
  uint64_t queued_bytes() const { return writer_.queue().bytes(); }
  uint64_t queued_bytes_peak() const { return writer_.queue().bytes_peak(); }

  // Read-only: changes go through WithSession.
  const session::PeerSession& session() const { return *session_; }
  // The session is over (the socket may still linger for the disconnect).
  bool session_over() const { return phase_.session_over(); }
  bool dialled() const { return dialled_; }
  uint64_t bytes_sent() const { return writer_.bytes_sent(); }
  uint64_t bytes_received() const { return reader_.bytes_received(); }
  std::string remote_address() const;
  const ConnectionStats& stats() const { return stats_; }
  size_t write_queue_depth() const { return writer_.queue().size(); }
  // For classifying the close (with session().close_cause()): the session
  // was ready at some point; this node found a protocol violation by the
  // peer (a label such as "malformed_frame", "before_handshake" or
  // "bad_fetch", from the close cause); the owner closed the connection
  // through Close().
  bool ever_ready() const { return ever_ready_; }
  const std::optional<std::string>& violation() const { return violation_; }
  bool closed_by_owner() const { return closed_by_owner_; }

 private:
  // The reader and the writer are this connection's two halves: they act on
  // its session, phase and listener and report back through the after-step
  // and the close paths.
  friend class PeerReader;
  friend class PeerWriter;

  // The session's identity check under TLS (session::IdentityCheck).
  Status CheckIdentity(const std::string& peer_id) const;
  void OnResolved(const std::string& host, const std::string& port, ResolvedEndpoints endpoints);
  boost::asio::awaitable<void> Dial(std::string host, std::string port,
                                    std::vector<boost::asio::ip::tcp::endpoint> endpoints);
  // Accepted TLS connection: the TLS handshake, then the loops.
  boost::asio::awaitable<void> AcceptTls();
  // Enters kRunning and starts the reader and the writer.
  void StartLoops();
  void StartTickLoop();
  boost::asio::awaitable<void> TickLoop();
  // The session's SendFn: queues `frame` unless the session is over.
  void Send(session::OutFrame frame);
  void AfterSessionActivity();
  // Wakes every parked loop (reader, writer, tick) to see the session is over.
  void Stop();
  void CloseSocketAndSession(session::CloseCause cause, const std::string& reason);
  // Keeps the socket of a closed connection open (at most kMaxLinger) until
  // the frame being written is out, then sends the disconnect and a FIN and
  // drops what the peer still sends until it closes too.
  void Linger();
  void SendDisconnectAndFin();
  void EndLinger();
  // The session is over and its socket is closed for good.
  void CloseSocket();
  // Counts a frame the session sent, and one it received (a lookup_resp
  // stops its lookup's round-trip clock).
  void CountSent(const protocol::Message& message);
  void CountReceived(const protocol::Message& message);
  // After the session closed on `message` (nullptr: a frame the decoder
  // refused): the violation's label, when the close cause is one.
  void NoteViolation(const protocol::Message* message);

  PeerStream stream_;
  boost::asio::ip::tcp::socket& socket_;  // stream_'s TCP socket
  session::PublishedBlocks& index_;
  ConnectionListener& listener_;
  std::unique_ptr<session::PeerSession> session_;
  // Where the connection is in its life. The flags below are not phases
  // but facts within one: which way it was made (dialled_), whether the
  // owner heard of the close (close_reported_: the close is reported once,
  // though the listener may close the connection again from within its
  // callback), and what classifies the close (ever_ready_,
  // closed_by_owner_, violation_).
  PeerPhaseTracker phase_;
  PeerReader reader_;
  PeerWriter writer_;
  boost::asio::steady_timer tick_timer_;
  // The dialled host's lookup while it runs; dropped on close, which
  // takes it back (its callback holds no reference to this connection).
  std::unique_ptr<PeerResolver::Lookup> lookup_;
  session::Duration liveness_timeout_;
  ConnectionStats stats_;
  // Lookups sent and not answered yet: round and send time, oldest first.
  std::deque<std::pair<protocol::RoundSeq, std::chrono::steady_clock::time_point>> lookups_awaiting_;
  std::string remote_;  // "address:port", captured while the socket is open
  bool dialled_ = false;
  bool close_reported_ = false;
  bool ever_ready_ = false;
  bool closed_by_owner_ = false;
  std::optional<std::string> violation_;
};

}  // namespace kvpeer::daemon
