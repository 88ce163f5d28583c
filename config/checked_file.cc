#include "config/checked_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvpeer::config {
namespace {

FileCheck Problem(FileProblem problem, const std::string& path, const std::string& what) {
  return {problem, "'" + path + "' " + what};
}

std::string Errno() { return std::strerror(errno); }

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

FileCheck Examine(int fd, const std::string& path, const FileRule& rule) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return Problem(FileProblem::kCannotExamine, path, "cannot be examined: " + Errno());
  if (!S_ISREG(info.st_mode)) return Problem(FileProblem::kNotRegular, path, "is not a regular file");
  if ((info.st_mode & rule.forbidden_bits) != 0) {
    return Problem(
        FileProblem::kModeForbidden, path,
        std::string(rule.forbidden_what) + " (mode " + OctalMode(info.st_mode) + "); allowed: " + rule.allowed);
  }
  if (static_cast<uint64_t>(info.st_size) > rule.max_bytes) {
    return Problem(FileProblem::kTooLarge, path,
                   "is " + std::to_string(info.st_size) + " bytes; " + rule.kind + " is at most " +
                       std::to_string(rule.max_bytes));
  }
  return {};
}

FileCheck ReadAll(int fd, const std::string& path, const FileRule& rule, std::string* contents) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Problem(FileProblem::kCannotRead, path, "cannot be read: " + Errno());
    if (n == 0) return {};
    contents->append(buffer, static_cast<size_t>(n));
    if (contents->size() > rule.max_bytes) return Problem(FileProblem::kGrew, path, "grew while being read");
  }
}

}  // namespace

FileRule SecretFileRule(uint64_t max_bytes) {
  return {.forbidden_bits = 0077,
          .forbidden_what = "grants permissions to group or others",
          .allowed = "owner-only, e.g. chmod 600",
          .max_bytes = max_bytes,
          .kind = "a key file"};
}

FileRule TrustedFileRule(uint64_t max_bytes) {
  return {.forbidden_bits = 0022,
          .forbidden_what = "is writable by group or others",
          .allowed = "writable by the owner only, e.g. chmod 644",
          .max_bytes = max_bytes,
          .kind = "a PEM file"};
}

std::string OctalMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

FileCheck ReadCheckedFile(const std::string& path, const FileRule& rule, std::string* contents) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
  // It changes nothing for the regular file that passes the checks.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return Problem(FileProblem::kCannotOpen, path, "cannot be opened: " + Errno());
  FileCloser closer(fd);
  FileCheck check = Examine(fd, path, rule);
  if (check.ok() && contents != nullptr) check = ReadAll(fd, path, rule, contents);
  return check;
}

}  // namespace kvpeer::config
