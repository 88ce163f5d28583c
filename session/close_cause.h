// CloseCause: why a peer session ended, as a value set where it ends, so
// that counting and labelling never read the close reason (which is
// written for people and may quote the peer).
//
// Thread-safety: a plain enum.
#pragma once

namespace kvpeer::session {

enum class CloseCause {
  kOpen,  // the session has not closed
  // This node refused the peer's connect or connect_ack (docs/wire-protocol.md,
  // "Handshake" and "Authentication and authorisation").
  kAuthentication,     // a missing or wrong proof, or an identity the transport does not vouch for
  kConfigFingerprint,  // the settings the two nodes must share differ
  kHashSeed,
  kBlockLen,
  kWireVersion,     // wire_major differs (in the connect or the connect_ack)
  kPeerId,          // not the node we dialled, or an ack naming another node than its connect
  kSelfConnection,  // our own epoch came back
  // This node found a protocol violation by the peer.
  kMalformedFrame,          // the frame decoder failed: nothing of the frame is trusted
  kMessageBeforeHandshake,  // a role's message or an unknown type before ready
  kBadMessage,              // a message out of order or with invalid content
  // A session operation failed with a status other than a violation (a
  // call this node should not have made).
  kLocalError,
  // The injected token source gave no nonce (base/random_token.h): the
  // session cannot prove or check freshness, so it ends.
  kNoRandomToken,
  // Timers (docs/wire-protocol.md, "Handshake", items 7 and 8).
  kHandshakeTimeout,
  kPeerSilent,  // nothing received, or nothing written, for the liveness timeout
  // A ready session held no work and carried none for its idle timeout
  // (SessionConfig::idle_timeout); it sent disconnect{reason:"idle"}.
  kIdle,
  // The peer sent disconnect; what it said is a PeerDisconnectReason.
  kPeerDisconnected,
  // The transport, as the daemon sees it.
  kConnectFailed,   // the name did not resolve or the TCP connect failed
  kTls,             // the TLS handshake failed
  kConnectionLost,  // the peer closed the connection, a read or a write failed
  // This node's owner closed the session on purpose.
  kOperator,
  kShutdown,
  kDuplicate,
  kPeerRestarted,
  kTooManyPeers,
};

}  // namespace kvpeer::session
