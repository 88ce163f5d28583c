#include "daemon/log_format.h"

#include <string_view>

#include <spdlog/pattern_formatter.h>

#include "config/printable.h"

namespace kvpeer::daemon {
namespace {

class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string escaped = config::Printable(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

}  // namespace

std::unique_ptr<spdlog::formatter> MakeLogFormatter(const std::string& pattern) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').set_pattern(pattern);
  return formatter;
}

}  // namespace kvpeer::daemon
