#include "daemon/control/control_connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "daemon/control/engine_session.h"

namespace kvpeer::daemon {
namespace {

namespace asio = boost::asio;

constexpr size_t kChunkBytes = 64 * 1024;
// Lines read ahead of the processor. Small: reading ahead only has to see
// the end of input during a long poll, not buffer a flood.
constexpr size_t kMaxQueuedLines = 16;
constexpr size_t kMaxFdsPerReceive = 8;
// More descriptors than any request uses; extras are closed at once.
constexpr size_t kMaxFdsPerLine = 4;

}  // namespace

ControlConnection::ControlConnection(Socket socket, PeerCredentials credentials, ControlHandler* handler)
    : socket_(std::move(socket)),
      credentials_(credentials),
      handler_(handler),
      processor_wake_(socket_.get_executor()),
      reader_wake_(socket_.get_executor()) {}

void ControlConnection::Start() {
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), ReadLoop(self), asio::detached);
  asio::co_spawn(socket_.get_executor(), ProcessLoop(self), asio::detached);
}

void ControlConnection::Stop() {
  handler_ = nullptr;
  Close();
}

void ControlConnection::set_engine(std::shared_ptr<EngineSession> engine) {
  engine_ = std::move(engine);
  if (input_ended_ && engine_) engine_->CutWaits();
}

asio::awaitable<void> ControlConnection::ReadLoop(std::shared_ptr<ControlConnection> self) {
  (void)self;  // held for the coroutine's lifetime
  std::vector<char> buffer(kChunkBytes);
  boost::system::error_code ec;
  while (!closed_) {
    if (ReadAheadFull()) {
      reader_wake_.expires_at(asio::steady_timer::time_point::max());
      co_await reader_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    co_await socket_.async_wait(Socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || closed_) break;
    const ssize_t received = Receive(buffer.data(), buffer.size());
    if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (received <= 0) break;  // end of input, or a reset connection
    const bool fits = Split(buffer.data(), static_cast<size_t>(received));
    processor_wake_.cancel();
    if (!fits) {
      too_large_ = true;
      break;
    }
  }
  EndInput();
}

bool ControlConnection::ReadAheadFull() const {
  return queue_.size() >= kMaxQueuedLines || unanswered_bytes() >= kMaxUnansweredBytes;
}

ssize_t ControlConnection::Receive(char* buffer, size_t size) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerReceive)];
  iovec iov{buffer, size};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t received = ::recvmsg(socket_.native_handle(), &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (received < 0) return received;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      UniqueFd owned(fd);  // closed here unless the line keeps it
      if (partial_fds_.size() < kMaxFdsPerLine) partial_fds_.push_back(std::move(owned));
    }
  }
  return received;
}

bool ControlConnection::Split(const char* data, size_t size) {
  while (size > 0) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', size));
    const size_t take = newline != nullptr ? static_cast<size_t>(newline - data) : size;
    if (partial_.size() + take > kMaxControlLineBytes) return false;
    partial_.append(data, take);
    if (newline == nullptr) break;
    // Counted by capacity: what the line really holds in memory.
    unanswered_bytes_ += partial_.capacity();
    queue_.push_back(ControlLine{std::move(partial_), std::move(partial_fds_)});
    partial_.clear();
    partial_fds_.clear();
    data += take + 1;
    size -= take + 1;
  }
  return true;
}

void ControlConnection::EndInput() {
  input_ended_ = true;
  if (engine_) engine_->CutWaits();
  processor_wake_.cancel();
}

asio::awaitable<void> ControlConnection::ProcessLoop(std::shared_ptr<ControlConnection> self) {
  boost::system::error_code ec;
  while (!closed_) {
    if (queue_.empty()) {
      if (too_large_) {
        std::string response = handler_->TooLargeResponse() + "\n";
        co_await asio::async_write(socket_, asio::buffer(response), asio::redirect_error(asio::use_awaitable, ec));
        break;
      }
      if (input_ended_) break;
      processor_wake_.expires_at(asio::steady_timer::time_point::max());
      co_await processor_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    ControlLine line = std::move(queue_.front());
    queue_.pop_front();
    const size_t line_bytes = line.text.capacity();  // as counted when queued
    // Named, not a temporary inside co_await: GCC 12 mishandles some
    // temporaries in co_await operands.
    asio::awaitable<std::string> handling = handler_->HandleLine(self, std::move(line));
    std::string response = co_await std::move(handling);
    if (closed_) break;  // stopped while the request was being handled
    response.push_back('\n');
    co_await asio::async_write(socket_, asio::buffer(response), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    // Answered: the reader may read that much more.
    unanswered_bytes_ -= line_bytes;
    reader_wake_.cancel();
  }
  Close();
}

void ControlConnection::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  processor_wake_.cancel();
  reader_wake_.cancel();
  if (engine_) engine_->Close();
  if (ControlHandler* handler = std::exchange(handler_, nullptr)) handler->OnConnectionClosed(this);
}

}  // namespace kvpeer::daemon
