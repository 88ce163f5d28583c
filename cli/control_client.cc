#include "cli/control_client.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cstring>

namespace kvpeer::cli {
namespace {

namespace json = boost::json;

// The control API's line limit plus the newline.
constexpr size_t kMaxLine = 16 * 1024 * 1024 + 1;

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
    case ENOENT: return Unreachable(path, why + " (is the daemon running?)");
    case ECONNREFUSED: return Unreachable(path, why + " (is the daemon running? the socket file may be stale)");
    case EACCES:
    case EPERM: return Unreachable(path, why + " (" + AccessHint(path) + ")");
    default: return Unreachable(path, why);
  }
}

std::string Connect(const Socket& socket, const std::string& path) {
  if (socket.fd() < 0) return Unreachable(path, std::string("socket(): ") + std::strerror(errno));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return Unreachable(path, "the path is longer than a Unix socket path may be (" +
                                 std::to_string(sizeof(address.sun_path) - 1) + " bytes)");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(socket.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return ConnectProblem(path, errno);
  }
  return "";
}

std::string SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    // MSG_NOSIGNAL: a daemon that refuses us (uid allowlist) closes the
    // socket; that must be an error message, not a SIGPIPE death.
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::string("sending the request failed: ") + std::strerror(errno);
    sent += static_cast<size_t>(n);
  }
  return "";
}

std::string ReadLine(int fd, std::chrono::seconds timeout, std::string* line) {
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buffer[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return "kvpeerd did not answer within " + std::to_string(timeout.count()) + " s";
    }
    if (n < 0) return std::string("reading the answer failed: ") + std::strerror(errno);
    if (n == 0) return "kvpeerd closed the connection without answering (is this user allowed to connect?)";
    line->append(buffer, static_cast<size_t>(n));
    size_t newline = line->find('\n');
    if (newline != std::string::npos) {
      line->resize(newline);
      return "";
    }
    if (line->size() > kMaxLine) return "kvpeerd's answer is longer than the 16 MiB line limit";
  }
}

std::string ParseResponse(const std::string& line, json::object* response) {
  boost::system::error_code error;
  json::value value = json::parse(line, error);
  if (error) return "kvpeerd sent an answer that is not JSON: " + error.message();
  if (!value.is_object()) return "kvpeerd sent an answer that is not a JSON object";
  *response = std::move(value.as_object());
  return "";
}

}  // namespace

ExchangeResult Exchange(const std::string& socket_path, const json::object& request, std::chrono::seconds timeout) {
  ExchangeResult result;
  Socket socket;
  result.problem = Connect(socket, socket_path);
  std::string line;
  if (result.problem.empty()) result.problem = SendAll(socket.fd(), json::serialize(request) + "\n");
  if (result.problem.empty()) result.problem = ReadLine(socket.fd(), timeout, &line);
  if (result.problem.empty()) result.problem = ParseResponse(line, &result.response);
  result.reached = result.problem.empty();
  return result;
}

}  // namespace kvpeer::cli
