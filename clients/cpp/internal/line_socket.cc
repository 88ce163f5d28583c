#include "clients/cpp/internal/line_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "kvpeer/descriptor_passing.h"

namespace kvpeer::internal {
namespace {

constexpr size_t kReadChunk = 64 * 1024;

Error ConnectionError(std::string message) { return Error{ErrorCode::kConnection, std::move(message)}; }

}  // namespace

Result<std::unique_ptr<LineSocket>> LineSocket::Connect(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return ConnectionError("control socket path '" + path + "' must be 1 ..= " +
                           std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ConnectionError(std::string("socket(AF_UNIX): ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    ::close(fd);
    return ConnectionError("cannot connect to kvpeerd at " + path + ": " + std::strerror(error));
  }
  return std::unique_ptr<LineSocket>(new LineSocket(fd, path));
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

Result<void> LineSocket::SendLine(std::string_view line, int fd) {
  if (fd_ < 0) return ConnectionError("the connection to kvpeerd at " + path_ + " is closed");
  std::string data;
  data.reserve(line.size() + 1);
  data.append(line).push_back('\n');
  size_t sent = 0;
  while (sent < data.size()) {
    // The descriptor goes with the line's first byte only.
    const int with = sent == 0 ? fd : -1;
    const ssize_t n = SendWithDescriptor(fd_, std::string_view(data).substr(sent), with);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Broken("sending to", errno);
    sent += static_cast<size_t>(n);
  }
  return {};
}

Result<std::string> LineSocket::ReadLine() {
  if (fd_ < 0) return ConnectionError("the connection to kvpeerd at " + path_ + " is closed");
  for (;;) {
    const size_t newline = buffer_.find('\n', begin_);
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(begin_, newline - begin_);
      begin_ = newline + 1;
      return line;
    }
    // Keep only the partial line before reading more.
    buffer_.erase(0, begin_);
    begin_ = 0;
    const size_t used = buffer_.size();
    buffer_.resize(used + kReadChunk);
    const ssize_t n = ::recv(fd_, buffer_.data() + used, kReadChunk, 0);
    buffer_.resize(used + static_cast<size_t>(n > 0 ? n : 0));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Broken("reading from", errno);
    if (n == 0) {
      Close();
      return ConnectionError("kvpeerd at " + path_ + " closed the control connection");
    }
  }
}

}  // namespace kvpeer::internal
