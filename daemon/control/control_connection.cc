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
// Lines read ahead of the one being answered. Small: reading ahead only has
// to see the end of input during a long poll, not buffer a flood.
constexpr size_t kMaxQueuedLines = 16;
constexpr size_t kMaxFdsPerReceive = 8;
// More descriptors than any request uses; extras are closed at once.
constexpr size_t kMaxFdsPerRead = 4;
// An output buffer grown beyond this by one large answer (status, a lookup
// of many keys) is given back once sent, not kept for the connection's life.
constexpr size_t kKeptOutputBytes = 64 * 1024;

bool WouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

}  // namespace

ControlConnection::ControlConnection(Socket socket, PeerCredentials credentials, ControlHandler* handler)
    : socket_(std::move(socket)), credentials_(credentials), handler_(handler), reader_wake_(socket_.get_executor()) {}

void ControlConnection::Start() {
  asio::co_spawn(socket_.get_executor(), ReadLoop(shared_from_this()), asio::detached);
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
      reader_waiting_ = true;
      reader_wake_.expires_at(asio::steady_timer::time_point::max());
      co_await reader_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      reader_waiting_ = false;
      continue;
    }
    if (!may_have_input_) {
      // The reactor is asked only once the socket had nothing more to give:
      // a waiting request costs an epoll_ctl, a pipelined burst does not.
      co_await socket_.async_wait(Socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || closed_) break;
      may_have_input_ = true;
    }
    const Received read = Receive(buffer.data(), buffer.size());  // errno is still recvmsg's after it
    const ssize_t received = read.bytes;
    if (received < 0 && WouldBlock(errno)) {
      if (errno != EINTR) may_have_input_ = false;
      continue;
    }
    if (received <= 0) break;  // end of input, or a reset connection
    // A short read took everything there was: wait before the next one.
    may_have_input_ = static_cast<size_t>(received) == buffer.size();
    if (!Split(buffer.data(), static_cast<size_t>(received), read.descriptors)) {
      too_large_ = true;
      break;
    }
    Pump();
  }
  EndInput();
}

boost::json::monotonic_resource& ControlConnection::NewParseMemory() {
  return parse_memory_.emplace(parse_buffer_, sizeof(parse_buffer_));
}

bool ControlConnection::ReadAheadFull() const {
  return queue_.size() >= kMaxQueuedLines || unanswered_bytes() >= kMaxUnansweredBytes;
}

UniqueFd ControlLine::TakeDescriptor() {
  if (!descriptors || descriptors->taken >= descriptors->fds.size()) return UniqueFd();
  return std::move(descriptors->fds[descriptors->taken++]);
}

ControlConnection::Received ControlConnection::Receive(char* buffer, size_t size) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerReceive)];
  iovec iov{buffer, size};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  Received received;
  received.bytes = ::recvmsg(socket_.native_handle(), &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (received.bytes < 0) return received;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      UniqueFd owned(fd);  // closed here unless a line may take it
      std::shared_ptr<ReceivedDescriptors>& descriptors = received.descriptors;
      if (!descriptors) descriptors = std::make_shared<ReceivedDescriptors>();
      if (descriptors->fds.size() < kMaxFdsPerRead) descriptors->fds.push_back(std::move(owned));
    }
  }
  return received;
}

bool ControlConnection::Split(const char* data, size_t size, const std::shared_ptr<ReceivedDescriptors>& descriptors) {
  if (descriptors) partial_descriptors_ = descriptors;  // the line this read goes on with, or begins
  while (size > 0) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', size));
    const size_t take = newline != nullptr ? static_cast<size_t>(newline - data) : size;
    if (partial_.size() + take > kMaxControlLineBytes) return false;
    partial_.append(data, take);
    if (newline == nullptr) break;
    // Counted by capacity: what the line really holds in memory.
    unanswered_bytes_ += partial_.capacity();
    queue_.push_back(ControlLine{std::move(partial_), std::move(partial_descriptors_)});
    partial_.clear();
    data += take + 1;
    size -= take + 1;
    // The next line has a part in this read only if bytes follow.
    partial_descriptors_ = size > 0 ? descriptors : nullptr;
  }
  return true;
}

void ControlConnection::EndInput() {
  input_ended_ = true;
  if (engine_) engine_->CutWaits();
  Pump();
}

void ControlConnection::Pump() {
  if (pumping_ || closed_) return;
  pumping_ = true;
  AnswerQueued();
  pumping_ = false;
  Flush();
  MaybeFinish();
}

void ControlConnection::AnswerQueued() {
  while (!queue_.empty() && !waiting_line_ && !closed_ && pending_answer_bytes() < kMaxPendingAnswerBytes) {
    ControlLine line = std::move(queue_.front());
    queue_.pop_front();
    const size_t line_bytes = line.text.capacity();  // as counted when queued
    std::optional<asio::awaitable<std::string>> later = handler_->HandleLine(*this, line, &out_);
    if (!later) {
      Answered(line_bytes);
      continue;
    }
    // The engine gets the answers before this line now, not after its wait.
    waiting_line_ = true;
    Flush();
    asio::co_spawn(socket_.get_executor(), Await(shared_from_this(), std::move(*later), line_bytes), asio::detached);
  }
}

asio::awaitable<void> ControlConnection::Await(std::shared_ptr<ControlConnection> self,
                                               asio::awaitable<std::string> answering, size_t line_bytes) {
  (void)self;  // held for the coroutine's lifetime
  std::string answer = co_await std::move(answering);
  if (closed_) co_return;  // stopped while the request was being handled
  out_ += answer;
  waiting_line_ = false;
  Answered(line_bytes);
  Pump();
}

void ControlConnection::Answered(size_t line_bytes) {
  unanswered_bytes_ -= line_bytes;
  if (reader_waiting_ && !ReadAheadFull()) reader_wake_.cancel();
}

void ControlConnection::Flush() {
  if (closed_ || writer_running_ || out_.empty()) return;
  const ssize_t sent = ::send(socket_.native_handle(), out_.data(), out_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent < 0 && !WouldBlock(errno)) return Close();  // the client is gone
  const size_t taken = sent > 0 ? static_cast<size_t>(sent) : 0;
  if (taken == out_.size()) {
    out_.clear();
    if (out_.capacity() > kKeptOutputBytes) out_ = std::string();
    return;
  }
  // The client does not keep up: the rest goes out as the socket drains.
  writing_.assign(out_, taken);
  out_.clear();
  writer_running_ = true;
  asio::co_spawn(socket_.get_executor(), WriteLoop(shared_from_this()), asio::detached);
}

asio::awaitable<void> ControlConnection::WriteLoop(std::shared_ptr<ControlConnection> self) {
  (void)self;  // held for the coroutine's lifetime
  boost::system::error_code ec;
  while (!closed_ && !writing_.empty()) {
    co_await asio::async_write(socket_, asio::buffer(writing_), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    writing_.clear();
    writing_.swap(out_);  // what was answered meanwhile
  }
  writing_ = std::string();
  writer_running_ = false;
  if (ec) {
    Close();
    co_return;
  }
  Pump();  // lines held back by the output bound, or the end
}

void ControlConnection::MaybeFinish() {
  if (closed_ || !input_ended_ || !queue_.empty() || waiting_line_) return;
  if (too_large_ && !too_large_answered_) {
    too_large_answered_ = true;
    out_ += handler_->TooLargeResponse();
    out_.push_back('\n');
    Flush();
  }
  if (writer_running_) return;  // WriteLoop comes back here once it is done
  Close();
}

void ControlConnection::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  reader_wake_.cancel();
  if (engine_) engine_->Close();
  if (ControlHandler* handler = std::exchange(handler_, nullptr)) handler->OnConnectionClosed(this);
}

}  // namespace kvpeer::daemon
