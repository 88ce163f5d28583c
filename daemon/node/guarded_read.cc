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

// A SIGBUS that some process sent (kill, sigqueue, tgkill: si_code <= 0,
// SI_USER, SI_QUEUE, SI_TKILL, ...) is not a fault: nothing is to be
// recovered and nothing runs again, so it is ignored, during a guarded read
// too (the read goes on). Only a fault of the memory being read (si_code
// > 0: BUS_ADRERR, BUS_OBJERR, ...) ends a guarded read. A fault outside a
// guarded read is a real bug: the previous disposition gets it (by default
// the process dies with SIGBUS as it would have without us). The handler
// is never taken away otherwise: before (issue 25, finding 6), one `kill
// -BUS` put the old disposition back for good, and the next truncated
// region killed the daemon.
void OnSigbus(int signal, siginfo_t* info, void* context) {
  if (info != nullptr && info->si_code <= 0) return;
  if (t_recovery != nullptr) siglongjmp(*t_recovery, 1);
  if ((g_previous_handler.sa_flags & SA_SIGINFO) != 0 && g_previous_handler.sa_sigaction != nullptr) {
    g_previous_handler.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_handler.sa_handler != SIG_DFL && g_previous_handler.sa_handler != SIG_IGN &&
      g_previous_handler.sa_handler != nullptr) {
    g_previous_handler.sa_handler(signal);
    return;
  }
  // Default (or ignored, which for a fault would re-run the faulting
  // instruction for ever): die of the signal. The faulting instruction runs
  // again on return, now under the default disposition.
  struct sigaction fatal {};
  fatal.sa_handler = SIG_DFL;
  sigemptyset(&fatal.sa_mask);
  ::sigaction(SIGBUS, &fatal, nullptr);
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

#if defined(__SANITIZE_THREAD__)
constexpr int kSaveMask = 1;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int kSaveMask = 1;
#else
constexpr int kSaveMask = 0;
#endif
#else
constexpr int kSaveMask = 0;
#endif

void UnblockSigbus() {
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  ::pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);
}

// Runs read(context) with SIGBUS caught. `read` must be plain C-like code:
// the jump out of it skips no destructors. Returns false on SIGBUS.
bool ReadGuarded(void (*read)(void*), void* context) {
  InstallHandlerOnce();
  sigjmp_buf recovery;
  // Jumping out of the handler leaves SIGBUS blocked (the kernel blocks it
  // while the handler runs, and so does ThreadSanitizer's signal wrapper
  // even under SA_NODEFER), and the next fault would kill the process (seen
  // in CI's TSan stage). So SIGBUS is unblocked after a jump, on the rare
  // path, instead of saving the mask here: sigsetjmp(_, 1) is a system call
  // for every block hashed, on both daemons of every load. The TSan build
  // keeps the saved mask as well, which is what its stage was proven with.
  if (sigsetjmp(recovery, kSaveMask) != 0) {
    t_recovery = nullptr;
    UnblockSigbus();
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

void InstallSigbusGuard() { InstallHandlerOnce(); }

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
