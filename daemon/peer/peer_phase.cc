#include "daemon/peer/peer_phase.h"

#include <spdlog/spdlog.h>

namespace kvpeer::daemon {

std::string_view PhaseName(PeerPhase phase) {
  switch (phase) {
    case PeerPhase::kIdle:
      return "idle";
    case PeerPhase::kResolving:
      return "resolving";
    case PeerPhase::kConnecting:
      return "connecting";
    case PeerPhase::kTlsHandshake:
      return "tls_handshake";
    case PeerPhase::kRunning:
      return "running";
    case PeerPhase::kLingering:
      return "lingering";
    case PeerPhase::kClosed:
      return "closed";
  }
  return "unknown";
}

bool PhaseMayFollow(PeerPhase from, PeerPhase to) {
  using enum PeerPhase;
  // Whatever has not closed yet may close: a failed lookup, connect or
  // handshake, a session ended before its loops ran, a lost socket.
  if (to == kClosed) return from != kClosed;
  switch (from) {
    case kIdle:
      return to == kResolving || to == kTlsHandshake || to == kRunning;
    case kResolving:
      return to == kConnecting;
    case kConnecting:
      return to == kTlsHandshake || to == kRunning;
    case kTlsHandshake:
      return to == kRunning;
    case kRunning:
      return to == kLingering;
    case kLingering:
    case kClosed:
      return false;
  }
  return false;
}

bool PeerPhaseTracker::Enter(PeerPhase next) {
  if (!PhaseMayFollow(phase_, next)) {
    spdlog::error("bug: a peer connection in phase {} may not enter phase {}; it stays {}", PhaseName(phase_),
                  PhaseName(next), PhaseName(phase_));
    return false;
  }
  phase_ = next;
  return true;
}

}  // namespace kvpeer::daemon
