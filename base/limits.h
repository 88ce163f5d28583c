// Limits that more than one layer checks, so each is written once. A limit
// only one layer checks stays with it (the wire's in protocol/limits.h,
// the options' in config/settings.h).
//
// Thread-safety: constants only.
#pragma once

#include <cstddef>

namespace kvpeer {

// One control API line, not counting its newline (docs/control-api.md,
// "Framing"): kvpeerd refuses a longer request, kvpeerctl a longer answer.
inline constexpr size_t kMaxControlLineBytes = 16u * 1024 * 1024;

}  // namespace kvpeer
