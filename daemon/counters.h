// Counters: named, monotonically increasing integers of the control side,
// reported by `status` (counters) and `metrics`.
//
// Names are snake_case ("requests", "errors_bad_request"); a name exists
// once it has been counted.
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace kvpeer::daemon {

class Counters {
 public:
  void Add(std::string_view name, uint64_t n = 1) {
    auto it = values_.find(name);
    if (it == values_.end()) it = values_.emplace(std::string(name), 0).first;
    it->second += n;
  }
  uint64_t Get(std::string_view name) const {
    auto it = values_.find(name);
    return it == values_.end() ? 0 : it->second;
  }
  const std::map<std::string, uint64_t, std::less<>>& values() const { return values_; }

 private:
  std::map<std::string, uint64_t, std::less<>> values_;
};

}  // namespace kvpeer::daemon
