#include "config/checked_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/unique_fd.h"

namespace kvpeer::config {
namespace {

std::string Errno() { return std::strerror(errno); }

std::string Named(const std::string& path, const std::string& what) { return "'" + path + "' " + what; }

Status Examine(int fd, const std::string& path, const FileRule& rule) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return Status::Unavailable(Named(path, "cannot be examined: " + Errno()));
  if (!S_ISREG(info.st_mode)) return Status::Invalid(Named(path, "is not a regular file"));
  if ((info.st_mode & rule.forbidden_bits) != 0) {
    return Status::Invalid(Named(
        path, std::string(rule.forbidden_what) + " (mode " + OctalMode(info.st_mode) + "); allowed: " + rule.allowed));
  }
  if (static_cast<uint64_t>(info.st_size) > rule.max_bytes) {
    return Status::TooLarge(Named(path, "is " + std::to_string(info.st_size) + " bytes; " + rule.kind + " is at most " +
                                            std::to_string(rule.max_bytes)));
  }
  return Status::Ok();
}

StatusOr<std::string> ReadAll(int fd, const std::string& path, const FileRule& rule) {
  std::string contents;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Unavailable(Named(path, "cannot be read: " + Errno()));
    if (n == 0) return contents;
    contents.append(buffer, static_cast<size_t>(n));
    if (contents.size() > rule.max_bytes) return Status::TooLarge(Named(path, "grew while being read"));
  }
}

// Opens `path` read-only and checks the opened file (fstat, not stat on the
// path, so the file checked is the file read). O_NONBLOCK: opening a FIFO
// for reading otherwise waits for a writer; it changes nothing for the
// regular file that passes the checks.
StatusOr<daemon::UniqueFd> OpenChecked(const std::string& path, const FileRule& rule) {
  daemon::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return Status::NotFound(Named(path, "cannot be opened: " + Errno()));
  if (Status problem = Examine(fd.get(), path, rule); !problem.ok()) return problem;
  return fd;
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

StatusOr<std::string> ReadCheckedFile(const std::string& path, const FileRule& rule) {
  StatusOr<daemon::UniqueFd> fd = OpenChecked(path, rule);
  if (!fd.ok()) return fd.status();
  return ReadAll(fd->get(), path, rule);
}

Status CheckFile(const std::string& path, const FileRule& rule) { return OpenChecked(path, rule).status(); }

}  // namespace kvpeer::config
