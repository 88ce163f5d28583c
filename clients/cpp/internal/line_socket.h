// One Unix stream connection carrying newline-delimited lines, with a file
// descriptor sent alongside a line when asked (SCM_RIGHTS, in the sendmsg
// that carries the line's first byte: control-api.md `register_region`).
//
// Every wait is bounded (ClientOptions): connecting by connect_timeout,
// sending a line and reading an answer by request_timeout (plus the
// answer's own `wait_ms`), and an answer line by max_line_bytes. The socket
// is non-blocking; waits are poll() with the time left. A timeout or an
// over-long line closes the connection: the stream cannot be resynchronised.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "kvpeer/client.h"
#include "kvpeer/result.h"

namespace kvpeer::internal {

class LineSocket {
 public:
  static Result<std::unique_ptr<LineSocket>> Connect(const std::string& path, const ClientOptions& options);
  ~LineSocket();
  LineSocket(const LineSocket&) = delete;
  LineSocket& operator=(const LineSocket&) = delete;

  // Sends `line` and a newline; `fd` >= 0 goes with the first byte. The
  // answer to it may take `wait_ms` longer than the request timeout.
  Result<void> SendLine(std::string_view line, int fd, uint32_t wait_ms = 0);
  // The next line, without its newline.
  Result<std::string> ReadLine();
  void Close();
  bool open() const { return fd_ >= 0; }

 private:
  using Clock = std::chrono::steady_clock;
  LineSocket(int fd, std::string path, const ClientOptions& options)
      : fd_(fd), path_(std::move(path)), options_(options) {}
  Error Broken(std::string_view doing, int error);
  // Waits until the socket is ready for `events` (POLLIN/POLLOUT) or the
  // deadline passes: false then (the caller reports the timeout).
  bool WaitFor(short events, Clock::time_point deadline);
  Error TimedOut(std::string what);

  int fd_;
  std::string path_;
  ClientOptions options_;
  std::string buffer_;  // received bytes not yet returned as lines
  size_t begin_ = 0;    // where the next line starts in buffer_
  // The `wait_ms` of each request sent and not yet answered, in order.
  std::deque<uint32_t> unanswered_waits_;
};

}  // namespace kvpeer::internal
