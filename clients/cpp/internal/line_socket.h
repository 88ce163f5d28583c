// One Unix stream connection carrying newline-delimited lines, with a file
// descriptor sent alongside a line when asked (SCM_RIGHTS, in the sendmsg
// that carries the line's first byte: control-api.md `register_region`).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kvpeer/result.h"

namespace kvpeer::internal {

class LineSocket {
 public:
  static Result<std::unique_ptr<LineSocket>> Connect(const std::string& path);
  ~LineSocket();
  LineSocket(const LineSocket&) = delete;
  LineSocket& operator=(const LineSocket&) = delete;

  // Sends `line` and a newline; `fd` >= 0 goes with the first byte.
  Result<void> SendLine(std::string_view line, int fd);
  // The next line, without its newline.
  Result<std::string> ReadLine();
  void Close();
  bool open() const { return fd_ >= 0; }

 private:
  LineSocket(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Error Broken(std::string_view doing, int error);

  int fd_;
  std::string path_;
  std::string buffer_;  // received bytes not yet returned as lines
  size_t begin_ = 0;    // where the next line starts in buffer_
};

}  // namespace kvpeer::internal
