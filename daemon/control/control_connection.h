// ControlConnection: one client of the control socket, as NDJSON lines in
// and out (docs/control-api.md section 1).
//
// One reader coroutine splits the byte stream into lines (at most 16 MiB
// each), collects file descriptors passed with SCM_RIGHTS, and answers
// every line it can at once: the handler appends the answers of consecutive
// lines to one output buffer, which goes out in one send once the lines
// read so far are done. A line that has to wait (connect, poll or lookup
// with wait_ms) first sends the answers before it, then runs in its own
// coroutine; later lines wait for it, so answers stay in request order.
//
// The reader reads before it waits: after a read that filled its buffer it
// reads again at once, and it asks the reactor to wait for input only when
// the socket had nothing more to give.
//
// Reading ahead is what lets the daemon notice an engine's exit while a
// long poll is still waiting; it is bounded by a small queue and by
// kMaxUnansweredBytes: request bytes received and not yet answered (queued
// lines, the line being handled, the partial line; by allocated size). At
// the bound the reader stops reading the socket until answers drain, so a
// client that pipelines large lines without reading its answers holds at
// most that much (docs/control-api.md, "6. Limits (ours)"). Answers the
// client does not read pile up in the output buffer only up to
// kMaxPendingAnswerBytes (plus one answer): beyond it no further line is
// answered until the socket takes them, so the queue fills and reading
// stops too.
//
// Descriptors: a client sends the line with "fd": true in the same sendmsg
// as its descriptor (control-api.md `register_region`). The kernel never
// puts two sendmsgs that carry descriptors into one recvmsg, but it does
// put descriptor-less ones before them, so a read's descriptors go to every
// line of that read and the line that asks takes one (ReceivedDescriptors).
//
// End of input: queued lines are still answered (a client may half-close
// after its last request) and their answers written, then the connection
// closes and its engine session (if any) is closed.
//
// Thread-safety: none; lives on the daemon's one io_context. Owned by its
// coroutines through shared_from_this.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/monotonic_resource.hpp>

#include "base/limits.h"
#include "daemon/control/engine_registry.h"
#include "base/unique_fd.h"

namespace kvpeer::daemon {

class ControlConnection;
class EngineSession;

// Request bytes one connection may have sent and not had answered.
inline constexpr size_t kMaxUnansweredBytes = 32u * 1024 * 1024;
// Answers written and not yet taken by the socket beyond which no further
// line is answered (one answer may go beyond it).
inline constexpr size_t kMaxPendingAnswerBytes = 1u * 1024 * 1024;

// The descriptors (SCM_RIGHTS) that arrived in one read, shared by every
// line that read carried a part of. Which of those lines a descriptor came
// with is not known: the kernel hands the sendmsg that carries descriptors
// to one read together with the descriptor-less sendmsgs queued before it
// (and ends the read there), so a client that pipelines `hello` and
// `register_region` without waiting may see both lines in that read. The
// line that asks for a descriptor (`register_region` with `fd: true`) takes
// the first one not yet taken; the rest close with the last of those lines.
struct ReceivedDescriptors {
  std::vector<UniqueFd> fds;
  size_t taken = 0;
};

// One request line and the descriptors of the reads that carried it.
struct ControlLine {
  std::string text;
  std::shared_ptr<ReceivedDescriptors> descriptors;  // null when no read carried any

  // The first descriptor not yet taken, or an invalid one.
  UniqueFd TakeDescriptor();
};

// What the connection needs from the server.
class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  // Answers one request line. A request answered at once appends its answer
  // line (with its newline) to *out and returns nullopt; one that has to
  // wait returns the awaitable that gives its answer line (with its
  // newline; empty when the connection closed meanwhile) and leaves *out
  // alone. The line's descriptors may be taken.
  virtual std::optional<boost::asio::awaitable<std::string>> HandleLine(ControlConnection& connection,
                                                                        ControlLine& line, std::string* out) = 0;
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
  // Answer bytes not yet taken by the socket (tests, diagnostics).
  size_t pending_answer_bytes() const { return out_.size() + writing_.size(); }
  // Fresh memory for parsing and answering the next line: a small buffer
  // of the connection, then heap blocks given back here at the next line
  // (no line is parsed while a waiting one still holds its request). Made
  // anew rather than released: a released monotonic_resource keeps
  // doubling the size of the blocks it asks for.
  boost::json::monotonic_resource& NewParseMemory();

 private:
  // Each coroutine holds `self`, which keeps the connection alive.
  boost::asio::awaitable<void> ReadLoop(std::shared_ptr<ControlConnection> self);
  // What one recvmsg gave: bytes read (0 = end of input, -1 with errno set
  // on failure) and the descriptors that came with them (null when none did).
  struct Received {
    ssize_t bytes = 0;
    std::shared_ptr<ReceivedDescriptors> descriptors;
  };
  Received Receive(char* buffer, size_t size);
  // Splits `size` new bytes of one read into lines, giving `descriptors`
  // (when not null) to every line the read carried a part of. False when a
  // line is too long.
  bool Split(const char* data, size_t size, const std::shared_ptr<ReceivedDescriptors>& descriptors);
  void EndInput();
  // The reader must wait for answers to drain before reading more.
  bool ReadAheadFull() const;
  // Answers queued lines until one has to wait, the output is over its
  // bound or the queue is empty; then sends what was answered.
  void Pump();
  void AnswerQueued();
  // Runs one waiting line, then answers the lines after it.
  boost::asio::awaitable<void> Await(std::shared_ptr<ControlConnection> self,
                                     boost::asio::awaitable<std::string> answering, size_t line_bytes);
  // A line is answered: its request bytes no longer count.
  void Answered(size_t line_bytes);
  // Sends out_ without blocking; what the socket does not take is written
  // by WriteLoop.
  void Flush();
  boost::asio::awaitable<void> WriteLoop(std::shared_ptr<ControlConnection> self);
  // Closes once input has ended and everything has been answered and sent.
  void MaybeFinish();
  // Closes the socket and the engine session, then tells the handler.
  void Close();

  Socket socket_;
  const PeerCredentials credentials_;
  ControlHandler* handler_;  // null once stopped
  std::shared_ptr<EngineSession> engine_;

  std::string partial_;                                       // the line being assembled
  std::shared_ptr<ReceivedDescriptors> partial_descriptors_;  // of the reads that carried it
  std::deque<ControlLine> queue_;                             // complete lines not answered yet
  size_t unanswered_bytes_ = 0;                               // of queue_ and the line being handled
  bool too_large_ = false;                                    // the reader found an over-long line
  bool too_large_answered_ = false;
  bool input_ended_ = false;
  bool closed_ = false;
  bool may_have_input_ = true;   // the last read filled the buffer: read again before waiting
  bool waiting_line_ = false;    // a line that waits is being answered (Await)
  bool pumping_ = false;         // inside Pump (no re-entry)
  bool reader_waiting_ = false;  // the reader waits on reader_wake_
  std::string out_;              // answers not handed to the socket yet
  std::string writing_;          // answers WriteLoop is writing (empty when it does not run)
  bool writer_running_ = false;
  boost::asio::steady_timer reader_wake_;  // cancelled when the queue drains
  alignas(std::max_align_t) unsigned char parse_buffer_[8192];
  std::optional<boost::json::monotonic_resource> parse_memory_;
};

}  // namespace kvpeer::daemon
