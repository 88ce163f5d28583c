#include "cli/control_client.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/limits.h"

namespace kvpeer::cli {
namespace {

namespace json = boost::json;

// The control API's line limit plus the newline.
constexpr size_t kMaxLine = kMaxControlLineBytes + 1;

class Socket {
 public:
  Socket() : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string Unreachable(const std::string& path, const std::string& why) {
  return "cannot reach kvpeerd at " + path + ": " + why;
}

// Why access was denied and what would fix it. The socket is mode 0660
// with a configurable group (control-api.md section 4), so the usual fix is
// joining that group.
std::string AccessHint(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    return "the socket's directory is not accessible to this user; check the directory permissions or run as root";
  }
  const group* owner = ::getgrgid(info.st_gid);
  std::string group = owner != nullptr ? owner->gr_name : std::to_string(info.st_gid);
  return "the socket is not accessible to this user; join its group '" + group + "' (e.g. usermod -aG " + group +
         " $USER, then log in again) or run as root";
}

std::string ConnectProblem(const std::string& path, int error) {
  std::string why = std::strerror(error);
  switch (error) {
    case ENOENT:
      return Unreachable(path, why + " (is the daemon running?)");
    case ECONNREFUSED:
      return Unreachable(path, why + " (is the daemon running? the socket file may be stale)");
    case EACCES:
    case EPERM:
      return Unreachable(path, why + " (" + AccessHint(path) + ")");
    default:
      return Unreachable(path, why);
  }
}

// One deadline for the whole exchange (connect, send, the full answer):
// `--timeout-s` bounds what the operator waits, so a daemon that answers one
// byte a second cannot stretch it (issue 11, finding 5).
class Deadline {
 public:
  explicit Deadline(std::chrono::seconds timeout)
      : timeout_(timeout), end_(std::chrono::steady_clock::now() + timeout) {}

  // Milliseconds left, rounded up so that poll() does not wake just short
  // of the end; 0 once it has passed.
  int RemainingMs() const {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 24 * 3600 * 1000));
  }

  // `step` says what was still unfinished, for the operator.
  std::string Expired(const std::string& step) const {
    return "kvpeerd did not answer within " + std::to_string(timeout_.count()) + " s (" + step + ")";
  }

 private:
  std::chrono::seconds timeout_;
  std::chrono::steady_clock::time_point end_;
};

enum class Wait { kReady, kExpired, kFailed };

// Waits until `fd` is ready for `events` (or has an error, which the next
// call reports) or the deadline passes; kFailed leaves errno set.
Wait WaitReady(int fd, short events, const Deadline& deadline) {
  for (;;) {
    int remaining = deadline.RemainingMs();
    if (remaining == 0) return Wait::kExpired;
    pollfd ready{fd, events, 0};
    int n = ::poll(&ready, 1, remaining);
    if (n > 0) return Wait::kReady;
    if (n < 0 && errno != EINTR) return Wait::kFailed;
  }
}

// Ok when ready, else what went wrong; `step` names what was unfinished.
Status WaitProblem(Wait wait, const Deadline& deadline, const std::string& step) {
  if (wait == Wait::kExpired) return Status::Unavailable(deadline.Expired(step));
  if (wait == Wait::kFailed) {
    return Status::Unavailable(std::string("waiting for kvpeerd failed: ") + std::strerror(errno));
  }
  return Status::Ok();
}

// A Unix-socket connect() cannot be polled for: non-blocking, it fails at
// once with EAGAIN when the daemon's backlog is full. So the socket stays
// blocking for it with SO_SNDTIMEO, which bounds an AF_UNIX connect, set to
// the time left; everything after is non-blocking and polled.
Status Connect(const Socket& socket, const std::string& path, const Deadline& deadline) {
  if (socket.fd() < 0) return Status::Unavailable(Unreachable(path, std::string("socket(): ") + std::strerror(errno)));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return Status::Unavailable(Unreachable(path, "the path is longer than a Unix socket path may be (" +
                                                     std::to_string(sizeof(address.sun_path) - 1) + " bytes)"));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  int remaining = std::max(deadline.RemainingMs(), 1);
  timeval tv{static_cast<time_t>(remaining / 1000), static_cast<suseconds_t>(remaining % 1000 * 1000)};
  ::setsockopt(socket.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(socket.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno == EAGAIN || errno == EINPROGRESS) {
      return Status::Unavailable(deadline.Expired("its socket did not accept the connection"));
    }
    return Status::Unavailable(ConnectProblem(path, errno));
  }
  if (::fcntl(socket.fd(), F_SETFL, ::fcntl(socket.fd(), F_GETFL) | O_NONBLOCK) != 0) {
    return Status::Unavailable(Unreachable(path, std::string("fcntl(O_NONBLOCK): ") + std::strerror(errno)));
  }
  return Status::Ok();
}

Status SendAll(int fd, const std::string& data, const Deadline& deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (Wait wait = WaitReady(fd, POLLOUT, deadline); wait != Wait::kReady) {
      return WaitProblem(wait, deadline, "it did not take the request");
    }
    // MSG_NOSIGNAL: a daemon that refuses us (uid allowlist) closes the
    // socket; that must be an error message, not a SIGPIPE death.
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) return Status::Unavailable(std::string("sending the request failed: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadLine(int fd, const Deadline& deadline, std::string* line) {
  char buffer[65536];
  for (;;) {
    if (Wait wait = WaitReady(fd, POLLIN, deadline); wait != Wait::kReady) {
      return WaitProblem(wait, deadline,
                         line->empty() ? "no byte of the answer arrived"
                                       : "the answer was incomplete after " + std::to_string(line->size()) + " bytes");
    }
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) return Status::Unavailable(std::string("reading the answer failed: ") + std::strerror(errno));
    if (n == 0) {
      return Status::Unavailable("kvpeerd closed the connection without answering (is this user allowed to connect?)");
    }
    size_t searched = line->size();  // only the new bytes can hold the newline
    line->append(buffer, static_cast<size_t>(n));
    size_t newline = line->find('\n', searched);
    if (newline != std::string::npos) {
      line->resize(newline);
      return Status::Ok();
    }
    if (line->size() > kMaxLine) return Status::Unavailable("kvpeerd's answer is longer than the 16 MiB line limit");
  }
}

Status ParseResponse(const std::string& line, json::object* response) {
  boost::system::error_code error;
  json::value value = json::parse(line, error);
  if (error) return Status::Unavailable("kvpeerd sent an answer that is not JSON: " + error.message());
  if (!value.is_object()) return Status::Unavailable("kvpeerd sent an answer that is not a JSON object");
  *response = std::move(value.as_object());
  return Status::Ok();
}

}  // namespace

StatusOr<json::object> Exchange(const std::string& socket_path, const json::object& request,
                                std::chrono::seconds timeout) {
  const Deadline deadline(timeout);
  Socket socket;
  std::string line;
  json::object response;
  Status status = Connect(socket, socket_path, deadline);
  if (status.ok()) status = SendAll(socket.fd(), json::serialize(request) + "\n", deadline);
  if (status.ok()) status = ReadLine(socket.fd(), deadline, &line);
  if (status.ok()) status = ParseResponse(line, &response);
  if (!status.ok()) return status;
  return response;
}

}  // namespace kvpeer::cli
