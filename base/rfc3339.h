// RFC 3339 UTC timestamps for status output ("2026-12-02T13:37:11Z").
#pragma once

#include <chrono>
#include <string>

namespace kvpeer {

std::string FormatRfc3339(std::chrono::system_clock::time_point time);

}  // namespace kvpeer
