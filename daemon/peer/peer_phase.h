// PeerPhase: where one PeerConnection is in its life, and which step it may
// take next. The connection's loops ask the phase (is the session over? may
// the writer finish its frame?) instead of a handful of booleans that had to
// be kept consistent by hand.
//
//   kIdle --StartDial--> kResolving --> kConnecting --+--> kTlsHandshake --+--> kRunning --> kLingering
//     |                                               |                    |        |              |
//     +--StartAccepted (TLS)--------------------------+                    |        |              |
//     +--StartAccepted (TCP)-----------------------------------------------+        |              |
//   every phase but kClosed --------------------------------------------------------+---> kClosed <+
//
// A dialled plain-TCP connection goes from kConnecting straight to kRunning.
// kLingering is a closed session whose socket stays open for the disconnect
// and the FIN (PeerConnection::Linger); kClosed is final.
//
// Thread-safety: none; one connection's io_context thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvpeer::daemon {

enum class PeerPhase : uint8_t {
  kIdle,          // constructed, not started
  kResolving,     // dialled: the host is being looked up
  kConnecting,    // dialled: the TCP connect runs
  kTlsHandshake,  // the TLS handshake runs (either side)
  kRunning,       // the reader and the writer run
  kLingering,     // the session is over; the socket waits for the disconnect and the FIN
  kClosed,        // the socket is closed (final)
};

std::string_view PhaseName(PeerPhase phase);

// The transition table: whether a connection in `from` may enter `to`.
bool PhaseMayFollow(PeerPhase from, PeerPhase to);

class PeerPhaseTracker {
 public:
  PeerPhase now() const { return phase_; }
  // Moves to `next` when the table allows it. An illegal step is a bug in
  // the connection: it is logged as one and refused (the phase stays), so
  // it never leaves the connection in a state no code expects. False when
  // refused.
  bool Enter(PeerPhase next);

  // The session is over: lingering or closed. No frame is queued any more.
  bool session_over() const { return phase_ == PeerPhase::kLingering || phase_ == PeerPhase::kClosed; }
  // The reader and writer loops were started (running or lingering).
  bool loops_started() const { return phase_ == PeerPhase::kRunning || phase_ == PeerPhase::kLingering; }
  bool lingering() const { return phase_ == PeerPhase::kLingering; }
  // The socket is closed for good (the session is over too).
  bool socket_closed() const { return phase_ == PeerPhase::kClosed; }

 private:
  PeerPhase phase_ = PeerPhase::kIdle;
};

}  // namespace kvpeer::daemon
