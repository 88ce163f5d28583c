#include "daemon/node/guarded_read.h"

#include <csetjmp>
#include <csignal>
#include <mutex>

#include "protocol/block_checksum.h"

namespace kvpeer::daemon {
namespace {

// The jump back out of the read in progress on this thread, if any.
thread_local sigjmp_buf* t_recovery = nullptr;
struct sigaction g_previous_handler;

void OnSigbus(int, siginfo_t*, void*) {
  if (t_recovery != nullptr) siglongjmp(*t_recovery, 1);
  // Not a guarded read: put the old disposition back and return, so the
  // faulting instruction runs again under it.
  ::sigaction(SIGBUS, &g_previous_handler, nullptr);
}

void InstallHandlerOnce() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_handler);
  });
}

// Runs read(context) with SIGBUS caught. `read` must be plain C-like code:
// the jump out of it skips no destructors. Returns false on SIGBUS.
bool ReadGuarded(void (*read)(void*), void* context) {
  InstallHandlerOnce();
  sigjmp_buf recovery;
  // The mask is saved and restored (a system call per read): jumping out of
  // the handler otherwise leaves SIGBUS blocked under ThreadSanitizer, whose
  // signal wrapper runs handlers with it blocked even under SA_NODEFER, and
  // the next fault kills the process (seen in CI's TSan stage).
  if (sigsetjmp(recovery, 1) != 0) {
    t_recovery = nullptr;
    return false;
  }
  t_recovery = &recovery;
  read(context);
  t_recovery = nullptr;
  return true;
}

struct OneShot {
  std::span<const uint8_t> bytes;
  uint64_t digest = 0;
};

}  // namespace

std::optional<uint64_t> GuardedChecksum(std::span<const uint8_t> bytes) {
  OneShot job{bytes};
  const bool read = ReadGuarded(
      [](void* context) {
        auto* one = static_cast<OneShot*>(context);
        one->digest = protocol::BlockChecksum(std::as_bytes(one->bytes));
      },
      &job);
  if (!read) return std::nullopt;
  return job.digest;
}

}  // namespace kvpeer::daemon
