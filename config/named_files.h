// The files the settings name, checked while parsing so that neither start
// nor a SIGHUP reload can stall on one (config/checked_file.h): the config
// file before CLI11 reads it, and the TLS files once all options are known.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "config/settings.h"

namespace kvpeer::config {

// A config file larger than this is not one (a wrong path, e.g. a log).
inline constexpr uint64_t kMaxConfigFileBytes = 1024 * 1024;
// A bound on each TLS file: a CA bundle of every public root is ~250 KiB.
inline constexpr uint64_t kMaxTlsFileBytes = 4 * 1024 * 1024;

// Checks each config file named on the command line ("--config PATH" or
// "--config=PATH"). One that cannot be opened is left to CLI11, whose error
// says so. Fails with "kvpeerd: config: ..." and a newline.
Status CheckConfigFiles(int argc, const char* const* argv);

// The TLS files go together, are regular files of bounded size, the key is
// the owner's alone and the certificate and CA bundle are writable by the
// owner only. One line per problem, "tls-key: '...' ...". Their contents
// are checked when the daemon builds its TLS context.
std::vector<std::string> TlsFileProblems(const Settings& settings);

}  // namespace kvpeer::config
