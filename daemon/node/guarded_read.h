// Reading engine memory that may vanish.
//
// An engine owns its region file and may shrink it at any time; the pages
// past the new end then raise SIGBUS when read through the daemon's mapping.
// The kernel's own copies (send/recv from and into a slot) fail with EFAULT
// instead, but hashing a block (wire-protocol.md 7.10) reads the slot in
// user space. A StillBacked() check first narrows the window without
// closing it, so every user-space read of a slot goes through here: SIGBUS
// during the read ends the read, not the daemon, and the caller learns the
// memory is gone (docs/security.md, "Control socket and engines").
//
// Thread-safety: a guard is per thread; the SIGBUS handler is installed once
// per process and stays. A SIGBUS sent by a process (kill, sigqueue: si_code
// SI_USER, SI_QUEUE, ...) is ignored; only a memory fault counts. A fault
// outside a guarded read is left to the handler that was there before (the
// process dies as it would have).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace kvpeer::daemon {

// XXH3-64 (seed 0) of `bytes` (protocol::BlockChecksum), or nullopt when
// the memory was gone while it was read.
std::optional<uint64_t> GuardedChecksum(std::span<const uint8_t> bytes);

// Installs the SIGBUS handler now (GuardedChecksum does on first use): the
// daemon calls it at start, so a signal sent before the first read finds it.
void InstallSigbusGuard();

}  // namespace kvpeer::daemon
