// The PSK proofs of the wire spec 1.1, section 5 (docs/wire-protocol.md,
// "6. Authentication and authorisation"). Each end of a
// connection proves that it holds the pre-shared key by MACing both nonces
// and both node ids of this connection, tagged with its role:
//
//   dialer:   HMAC-SHA256(psk, "kvpeer-v1.1" | "dialer"   | acceptor's nonce |
//                               dialer's nonce | dialer's peer_id | acceptor's peer_id)
//   acceptor: HMAC-SHA256(psk, "kvpeer-v1.1" | "acceptor" | dialer's nonce |
//                               acceptor's nonce | acceptor's peer_id | dialer's peer_id)
//
// `|` is one 0x00 byte. Because a proof names the role and both ends'
// nonces, a proof made for one connection never verifies on another, and
// one end's proof can never pass for the other end's (1.0's proofs MACed
// only the answered connect, so a third node could relay them).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>
#include <string_view>

namespace kvpeer::session {

enum class ProofRole { kDialer, kAcceptor };

// The fields of one proof, named from the prover's side.
struct ProofInput {
  ProofRole prover_role = ProofRole::kDialer;
  std::string_view verifier_nonce;  // the other end's connect.nonce
  std::string_view prover_nonce;    // the prover's own connect.nonce
  std::string_view prover_id;       // the prover's connect.peer_id
  std::string_view verifier_id;     // the other end's connect.peer_id
};

// Lowercase hex of the HMAC (64 digits); empty only if OpenSSL fails, and an
// empty proof never verifies.
std::string PskProof(std::string_view psk, const ProofInput& input);

// Compares two proofs in time independent of where they differ, so a prober
// cannot learn the expected proof byte by byte.
bool ProofsEqual(std::string_view expected, std::string_view received);

}  // namespace kvpeer::session
