#include "config/psk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvpeer::config {
namespace {

Status PskError(const std::string& path, const std::string& what) {
  return Status::Invalid("psk-file: '" + path + "' " + what);
}

std::string OctalMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Closes the descriptor on every return path.
class FileCloser {
 public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() { ::close(fd_); }
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;

 private:
  int fd_;
};

// Checks the opened file itself (fstat, not stat on the path), so the file
// checked is the file read even if the path is swapped meanwhile.
Status CheckFile(int fd, const std::string& path) {
  struct stat info;
  if (::fstat(fd, &info) != 0) return PskError(path, std::string("cannot be examined: ") + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) return PskError(path, "is not a regular file");
  // Wire spec 1.1 section 5: any permission for group or others refuses
  // the key, writable as well as readable (a writer could swap the key).
  if ((info.st_mode & 077) != 0) {
    return PskError(path, "grants permissions to group or others (mode " + OctalMode(info.st_mode) +
                              "); allowed: owner-only, e.g. chmod 600");
  }
  if (static_cast<uint64_t>(info.st_size) > kMaxPskFileBytes) {
    return PskError(path, "is " + std::to_string(info.st_size) + " bytes; a key file is at most " +
                              std::to_string(kMaxPskFileBytes));
  }
  return Status::Ok();
}

Status ReadAll(int fd, const std::string& path, std::string* contents) {
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PskError(path, std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0) return Status::Ok();
    contents->append(buffer, static_cast<size_t>(n));
    if (contents->size() > kMaxPskFileBytes) return PskError(path, "grew while being read");
  }
}

}  // namespace

std::string StripOneNewline(std::string contents) {
  if (contents.ends_with("\r\n")) {
    contents.resize(contents.size() - 2);
  } else if (contents.ends_with('\n')) {
    contents.pop_back();
  }
  return contents;
}

Status LoadPsk(const std::string& path, std::string* key) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return PskError(path, std::string("cannot be opened: ") + std::strerror(errno));
  FileCloser closer(fd);
  Status status = CheckFile(fd, path);
  std::string contents;
  if (status.ok()) status = ReadAll(fd, path, &contents);
  if (!status.ok()) return status;
  std::string stripped = StripOneNewline(std::move(contents));
  if (stripped.size() < kMinPskBytes) {
    return PskError(path, "holds a " + std::to_string(stripped.size()) + "-byte key; at least " +
                              std::to_string(kMinPskBytes) +
                              " bytes are required (after removing one trailing newline)");
  }
  *key = std::move(stripped);
  return Status::Ok();
}

}  // namespace kvpeer::config
