// PeerConnection: one TCP connection to one peer node, owning its
// PeerSession and the bytes moving through it.
//
// Reading is zero-copy for block data: a small read-ahead buffer carries
// prefixes and headers through the FrameDecoder, and once a block_data header
// is accepted the payload is received straight into the destination slots
// the session names (bytes already in the read-ahead buffer are the only
// ones copied). Writing is one FIFO of frames: the session's control frames
// are appended as they are sent, and a data frame is pulled from the session
// only when the FIFO is empty, so a control frame never waits behind more
// than one data frame. A block_data payload is written with scatter/gather
// straight from the source blocks, which stay pinned until the frame is
// written and dropped.
//
// Closing: the socket is closed before the session fails its work, so no
// byte can land in a slot after its load's result has been reported.
//
// Thread-safety: everything runs on the daemon's one io_context.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "protocol/frame_decoder.h"
#include "session/peer_session.h"

namespace kvpeer::daemon {

class PeerConnection;

// What the connection tells its owner (the PeerManager).
class ConnectionListener {
 public:
  virtual ~ConnectionListener() = default;
  // The session may have results, a new handshake state or a new peer
  // identity; called after every batch of session activity.
  virtual void OnSessionActivity(PeerConnection& connection) = 0;
  // The connection is closed for good; called exactly once, after the final
  // OnSessionActivity that carries the failed work.
  virtual void OnConnectionClosed(PeerConnection& connection) = 0;
};

class PeerConnection : public std::enable_shared_from_this<PeerConnection> {
 public:
  // `expected_peer_id` is the dialled peer, empty for an accepted socket.
  PeerConnection(boost::asio::ip::tcp::socket socket, session::SessionConfig config, session::BlockIndex& index,
                 std::string expected_peer_id, ConnectionListener& listener);
  ~PeerConnection();

  // Accepted socket: starts the session and the I/O loops.
  void StartAccepted();
  // Dials `host:port` of the expected peer; the session starts at once so
  // work can queue while the dial is in progress. A dial that fails closes
  // the connection with a reason naming the address and the error.
  void StartDial(const std::string& host, const std::string& port);

  // Closes the socket, then ends the session (its work fails with `reason`).
  // Sends disconnect{reason} first, best effort, when `notify_peer`.
  void Close(const std::string& reason, bool notify_peer = true);

  // Call after operating on session() from outside (engine ops): wakes the
  // writer and reports results.
  void AfterExternalOp();

  session::PeerSession& session() { return *session_; }
  const session::PeerSession& session() const { return *session_; }
  bool closed() const { return closed_; }
  bool dialled() const { return dialled_; }
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  std::string remote_address() const;

 private:
  boost::asio::awaitable<void> ReadLoop();
  boost::asio::awaitable<void> WriteLoop();
  boost::asio::awaitable<void> TickLoop();
  boost::asio::awaitable<void> Dial(std::string host, std::string port);
  void StartLoops();

  // Acts on the decoder's state after bytes arrived; false once the
  // connection must stop reading.
  bool ProcessDecoderState();
  bool OnHeaderReady();
  void OnFrameReady();
  void Enqueue(session::OutFrame frame);
  void AfterSessionActivity();
  void CloseSocketAndSession(const std::string& reason);
  void TrySendDisconnectNow();

  boost::asio::ip::tcp::socket socket_;
  session::BlockIndex& index_;
  ConnectionListener& listener_;
  std::unique_ptr<session::PeerSession> session_;
  protocol::FrameDecoder decoder_;
  std::vector<uint8_t> read_buffer_;
  size_t read_begin_ = 0;
  size_t read_end_ = 0;
  std::deque<session::OutFrame> write_queue_;
  boost::asio::steady_timer writer_wake_;
  boost::asio::steady_timer tick_timer_;
  bool dialled_ = false;
  bool loops_started_ = false;
  bool write_in_progress_ = false;
  bool closed_ = false;
  bool close_reported_ = false;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
};

}  // namespace kvpeer::daemon
