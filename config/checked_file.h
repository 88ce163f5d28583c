// Reading the files kvpeerd reads at start and again on every SIGHUP (the
// config file, --psk-file, --tls-cert/--tls-key/--tls-ca) so that none of
// them can stall the daemon's event loop or flood its memory, and so that a
// secret is refused when others may read or replace it.
//
// Rules (docs/security.md, "Pre-shared key (`--psk-file`)" and the "File
// permissions" item of "TLS identity: a certificate speaks for one node"):
//   * the path is opened read-only and non-blocking, so a FIFO or device
//     there returns at once instead of waiting for a writer (a FIFO at the
//     PSK path once froze `status` for 9.5 s on SIGHUP); the opened file
//     itself is then examined (fstat, not stat on the path), so the file
//     checked is the file read;
//   * it must be a regular file no larger than the rule's bound;
//   * it must not carry any of the rule's forbidden permission bits.
// Symlinks are followed (Kubernetes secrets and certbot's live/ directory
// are symlinks); the rules apply to the file they lead to.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/status_or.h"

namespace kvpeer::config {

struct FileRule {
  mode_t forbidden_bits = 0;        // e.g. 0077: nothing for group or others
  const char* forbidden_what = "";  // "grants permissions to group or others"
  const char* allowed = "";         // "owner-only, e.g. chmod 600"
  uint64_t max_bytes = 0;
  const char* kind = "";  // "a key file", in the size message
};

// Owner-only secrets: the PSK and the TLS private key (wire spec 1.1
// section 5: a key others can read or write authenticates nobody).
FileRule SecretFileRule(uint64_t max_bytes);
// Public but trusted files: the TLS certificate and CA bundle. Others may
// read them; nobody but the owner may write them (a writer could make the
// node trust a CA of their own, or present a certificate of their choice).
FileRule TrustedFileRule(uint64_t max_bytes);

// Failures name the path and the rule, without a prefix, e.g.
// "'/etc/kvpeer/psk' grants permissions to group or others (mode 0640);
// allowed: owner-only, e.g. chmod 600". Their codes are the causes callers
// tell apart:
//   kNotFound     open(2) failed (missing, permission denied, ...);
//   kUnavailable  fstat(2) or read(2) failed;
//   kInvalid      not a regular file (a directory, FIFO, socket or device),
//                 or it carries a permission bit the rule forbids;
//   kTooLarge     larger than the rule's bound, or grew past it while read.

// Opens and checks `path` under `rule`, then reads the whole file.
StatusOr<std::string> ReadCheckedFile(const std::string& path, const FileRule& rule);

// Opens and checks `path` under `rule` without reading it.
Status CheckFile(const std::string& path, const FileRule& rule);

// A mode as four octal digits ("0640").
std::string OctalMode(mode_t mode);

}  // namespace kvpeer::config
