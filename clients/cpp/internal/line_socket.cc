#include "clients/cpp/internal/line_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "kvpeer/descriptor_passing.h"

namespace kvpeer::internal {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// A listener whose accept queue is full answers a non-blocking connect
// with EAGAIN at once; it is asked again this often until the deadline.
constexpr auto kConnectRetry = std::chrono::milliseconds(10);

Error ConnectionError(std::string message) { return Error{ErrorCode::kConnection, std::move(message)}; }

std::string Seconds(std::chrono::milliseconds time) {
  const auto ms = time.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

}  // namespace

Result<std::unique_ptr<LineSocket>> LineSocket::Connect(const std::string& path, const ClientOptions& options) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return ConnectionError("control socket path '" + path +
                           "' must be 1 ..= " + std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ConnectionError(std::string("socket(AF_UNIX): ") + std::strerror(errno));
  std::unique_ptr<LineSocket> socket(new LineSocket(fd, path, options));
  const Clock::time_point deadline = Clock::now() + options.connect_timeout;
  const auto timed_out = [&] {
    socket->Close();
    return Error{ErrorCode::kTimeout, "cannot connect to kvpeerd at " + path + " within " +
                                          Seconds(options.connect_timeout) +
                                          " (ClientOptions::connect_timeout; its accept queue stays full)"};
  };
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) break;
    const int error = errno;
    if (error == EINTR) continue;
    if (error == EINPROGRESS) {
      if (!socket->WaitFor(POLLOUT, deadline)) return timed_out();
      int result = 0;
      socklen_t len = sizeof(result);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &result, &len);
      if (result == 0) break;
      socket->Close();
      return ConnectionError("cannot connect to kvpeerd at " + path + ": " + std::strerror(result));
    }
    if (error != EAGAIN) {
      socket->Close();
      return ConnectionError("cannot connect to kvpeerd at " + path + ": " + std::strerror(error));
    }
    if (Clock::now() + kConnectRetry >= deadline) return timed_out();
    std::this_thread::sleep_for(kConnectRetry);
  }
  return socket;
}

LineSocket::~LineSocket() { Close(); }

void LineSocket::Close() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
}

Error LineSocket::Broken(std::string_view doing, int error) {
  Close();
  return ConnectionError(std::string(doing) + " kvpeerd at " + path_ + ": " + std::strerror(error));
}

Error LineSocket::TimedOut(std::string what) {
  Close();
  return Error{ErrorCode::kTimeout, std::move(what) + "; the connection is closed"};
}

bool LineSocket::WaitFor(short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd entry{fd_, events, 0};
    // poll's timeout is an int of milliseconds; long waits go round again.
    const int timeout = static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
    const int ready = ::poll(&entry, 1, timeout);
    if (ready > 0) return true;  // ready, or an error the next call reports
    if (ready < 0 && errno != EINTR) return true;
  }
}

Result<void> LineSocket::SendLine(std::string_view line, int fd, uint32_t wait_ms) {
  if (fd_ < 0) return ConnectionError("the connection to kvpeerd at " + path_ + " is closed");
  std::string data;
  data.reserve(line.size() + 1);
  data.append(line).push_back('\n');
  const Clock::time_point deadline = Clock::now() + options_.request_timeout;
  size_t sent = 0;
  while (sent < data.size()) {
    // The descriptor goes with the line's first byte only.
    const int with = sent == 0 ? fd : -1;
    const ssize_t n = SendWithDescriptor(fd_, std::string_view(data).substr(sent), with);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(POLLOUT, deadline)) {
        return TimedOut("kvpeerd at " + path_ + " took no request bytes for " + Seconds(options_.request_timeout) +
                        " (ClientOptions::request_timeout)");
      }
      continue;
    }
    if (n < 0) return Broken("sending to", errno);
    sent += static_cast<size_t>(n);
  }
  unanswered_waits_.push_back(wait_ms);
  return {};
}

Result<std::string> LineSocket::ReadLine() {
  if (fd_ < 0) return ConnectionError("the connection to kvpeerd at " + path_ + " is closed");
  const uint32_t wait_ms = unanswered_waits_.empty() ? 0 : unanswered_waits_.front();
  const auto allowed = options_.request_timeout + std::chrono::milliseconds(wait_ms);
  const Clock::time_point deadline = Clock::now() + allowed;
  size_t searched = begin_;  // bytes before this hold no newline
  for (;;) {
    const size_t newline = buffer_.find('\n', searched);
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(begin_, newline - begin_);
      begin_ = newline + 1;
      if (!unanswered_waits_.empty()) unanswered_waits_.pop_front();
      return line;
    }
    // Keep only the partial line before reading more.
    buffer_.erase(0, begin_);
    begin_ = 0;
    searched = buffer_.size();
    if (buffer_.size() > options_.max_line_bytes) {
      const size_t held = buffer_.size();
      buffer_ = std::string();
      Close();
      return Error{ErrorCode::kBadAnswer, "kvpeerd at " + path_ + " sent an answer line longer than " +
                                              std::to_string(options_.max_line_bytes) + " bytes (" +
                                              std::to_string(held) +
                                              " without a newline; ClientOptions::max_line_bytes); the "
                                              "connection is closed"};
    }
    const size_t used = buffer_.size();
    // Never read past the bound by more than one chunk.
    buffer_.resize(used + kReadChunk);
    const ssize_t n = ::recv(fd_, buffer_.data() + used, kReadChunk, 0);
    buffer_.resize(used + static_cast<size_t>(n > 0 ? n : 0));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(POLLIN, deadline)) {
        return TimedOut("no answer from kvpeerd at " + path_ + " within " + Seconds(allowed) +
                        " (ClientOptions::request_timeout" + (wait_ms != 0 ? " plus the request's wait_ms" : "") + ")");
      }
      continue;
    }
    if (n < 0) return Broken("reading from", errno);
    if (n == 0) {
      Close();
      return ConnectionError("kvpeerd at " + path_ + " closed the control connection");
    }
  }
}

}  // namespace kvpeer::internal
