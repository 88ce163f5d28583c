// The PSK proof of wire-protocol.md section 5: a connect_ack proves that its
// sender holds the pre-shared key by MACing the connect it answers.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>
#include <string_view>

namespace kvpeer::session {

// Lowercase hex HMAC-SHA256(psk, "kvpeer-v1" 0x00 nonce 0x00 epoch 0x00 prover_id).
// `nonce` and `epoch` are the 32-digit hex strings of the connect being
// answered; `prover_id` is the node id of the end that sends the proof.
std::string PskProof(std::string_view psk, std::string_view nonce, std::string_view epoch,
                     std::string_view prover_id);

// Compares two proofs in time independent of where they differ, so a prober
// cannot learn the expected proof byte by byte.
bool ProofsEqual(std::string_view expected, std::string_view received);

}  // namespace kvpeer::session
