// ControlConnection: one client of the control socket, as NDJSON lines in
// and out (docs/control-api.md section 1).
//
// Two coroutines share the connection, as in Asio's chat server example: a
// reader that splits the byte stream into lines (at most 16 MiB each) and
// collects file descriptors passed with SCM_RIGHTS, and a processor that
// hands each line to the ControlHandler and writes the responses in request
// order. Reading ahead is what lets the daemon notice an engine's exit
// while a long poll is still waiting; it is bounded by a small queue and by
// kMaxUnansweredBytes: request bytes received and not yet answered (queued
// lines, the line being handled, the partial line; by allocated size). At the bound the reader
// stops reading the socket until answers drain, so a client that pipelines
// large lines without reading its answers holds at most that much
// (docs/control-api.md, "6. Limits (ours)").
//
// A descriptor belongs to the line whose first byte arrived together with
// it (the kernel never merges data of two sendmsg calls that carry
// descriptors into one recvmsg), so a client sends the line with "fd": true
// in the same sendmsg as the descriptor.
//
// End of input: queued lines are still answered (a client may half-close
// after its last request), then the connection closes and its engine
// session (if any) is closed.
//
// Thread-safety: none; lives on the daemon's one io_context. Owned by its
// coroutines through shared_from_this.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/limits.h"
#include "daemon/control/engine_registry.h"
#include "base/unique_fd.h"

namespace kvpeer::daemon {

class ControlConnection;
class EngineSession;

// Request bytes one connection may have sent and not had answered.
inline constexpr size_t kMaxUnansweredBytes = 32u * 1024 * 1024;

// One request line and the descriptors that arrived with it.
struct ControlLine {
  std::string text;
  std::vector<UniqueFd> fds;
};

// What the connection needs from the server.
class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  // The response line (without newline) to one request line.
  virtual boost::asio::awaitable<std::string> HandleLine(std::shared_ptr<ControlConnection> connection,
                                                         ControlLine line) = 0;
  // The response to a line longer than kMaxControlLineBytes.
  virtual std::string TooLargeResponse() = 0;
  // The connection has closed (after its engine session was closed).
  virtual void OnConnectionClosed(ControlConnection* connection) = 0;
};

class ControlConnection : public std::enable_shared_from_this<ControlConnection> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;

  ControlConnection(Socket socket, PeerCredentials credentials, ControlHandler* handler);
  ControlConnection(const ControlConnection&) = delete;
  ControlConnection& operator=(const ControlConnection&) = delete;

  // Starts reading and answering.
  void Start();
  // Closes the socket and the engine session; the handler is not called
  // again (not even OnConnectionClosed). Idempotent.
  void Stop();

  const PeerCredentials& credentials() const { return credentials_; }
  // The engine session opened by this connection's hello, or null.
  const std::shared_ptr<EngineSession>& engine() const { return engine_; }
  void set_engine(std::shared_ptr<EngineSession> engine);
  bool input_ended() const { return input_ended_; }
  // Closed or stopped: the handler must not be used on its behalf.
  bool closed() const { return closed_; }
  // Request bytes received and not yet answered (tests, diagnostics).
  size_t unanswered_bytes() const { return unanswered_bytes_ + partial_.capacity(); }

 private:
  // Each coroutine holds `self`, which keeps the connection alive.
  boost::asio::awaitable<void> ReadLoop(std::shared_ptr<ControlConnection> self);
  boost::asio::awaitable<void> ProcessLoop(std::shared_ptr<ControlConnection> self);
  // One recvmsg. Returns bytes read (0 = end of input), or -1 with errno.
  ssize_t Receive(char* buffer, size_t size);
  // Splits `size` new bytes into lines. False when a line is too long.
  bool Split(const char* data, size_t size);
  void EndInput();
  // The reader must wait for answers to drain before reading more.
  bool ReadAheadFull() const;
  // Closes the socket and the engine session, then tells the handler.
  void Close();

  Socket socket_;
  const PeerCredentials credentials_;
  ControlHandler* handler_;  // null once stopped
  std::shared_ptr<EngineSession> engine_;

  std::string partial_;               // the line being assembled
  std::vector<UniqueFd> partial_fds_;  // descriptors that arrived with it
  std::deque<ControlLine> queue_;      // complete lines not answered yet
  size_t unanswered_bytes_ = 0;        // of queue_ and the line being handled
  bool too_large_ = false;             // the reader found an over-long line
  bool input_ended_ = false;
  bool closed_ = false;
  boost::asio::steady_timer processor_wake_;  // cancelled when a line is queued
  boost::asio::steady_timer reader_wake_;     // cancelled when the queue drains
};

}  // namespace kvpeer::daemon
