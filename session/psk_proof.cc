#include "session/psk_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <cstdint>

#include "base/hex.h"

namespace kvpeer::session {

namespace {

// The MACed message. The 0x00 separators make the field boundaries
// unambiguous: no field (a role name, hex digits, a host:port) contains 0x00.
std::string ProofMessage(const ProofInput& input) {
  const std::string_view role = input.prover_role == ProofRole::kDialer ? "dialer" : "acceptor";
  std::string message("kvpeer-v1.1");
  for (std::string_view field : {role, input.verifier_nonce, input.prover_nonce, input.prover_id, input.verifier_id}) {
    message.push_back('\0');
    message.append(field);
  }
  return message;
}

}  // namespace

std::string PskProof(std::string_view psk, const ProofInput& input) {
  const std::string message = ProofMessage(input);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  // A PSK file is small (the daemon reads it whole), so its size fits an int.
  const int key_len = psk.size() > INT_MAX ? INT_MAX : static_cast<int>(psk.size());
  if (HMAC(EVP_sha256(), psk.data(), key_len, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
           mac, &mac_len) == nullptr) {
    return {};
  }
  return ToHex(std::string_view(reinterpret_cast<const char*>(mac), mac_len));
}

bool ProofsEqual(std::string_view expected, std::string_view received) {
  // The length of a valid proof is public (64 hex digits), so checking it
  // first leaks nothing.
  if (expected.empty() || expected.size() != received.size()) return false;
  return CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

}  // namespace kvpeer::session
