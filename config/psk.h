// Loading the pre-shared key for peer authentication (--psk-file).
//
// Rules (wire-protocol.md section 5): the key is the file's bytes with ONE
// trailing newline (LF or CR LF) removed, and must be at least 32 bytes; a
// file granting group or others any permission is refused, because a key
// others can read or write authenticates nobody; it must be a regular file
// of at most 64 KiB, opened non-blocking (config/checked_file.h). The key
// bytes are a secret: they are never logged or reported, and error
// messages name only the path.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"
#include "base/status_or.h"

namespace kvpeer::config {

inline constexpr size_t kMinPskBytes = 32;
// A guard against pointing --psk-file at the wrong (large) file.
inline constexpr size_t kMaxPskFileBytes = 64 * 1024;

// Reads and checks the key file at `path`; returns the key. Failure is
// Status::Invalid with a message starting "psk-file: " that names the path
// and the rule, e.g. "psk-file: '/etc/kvpeer/psk' grants permissions to
// group or others (mode 0640); allowed: owner-only, e.g. chmod 600".
StatusOr<std::string> LoadPsk(const std::string& path);

// `contents` with one trailing "\n" or "\r\n" removed (exposed for tests).
std::string StripOneNewline(std::string contents);

}  // namespace kvpeer::config
