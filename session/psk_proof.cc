#include "session/psk_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <cstdint>

#include "protocol/codec.h"

namespace kvpeer::session {

namespace {

// The MACed message. The 0x00 separators make the field boundaries
// unambiguous: no field (hex digits, a host:port) can contain a 0x00.
std::string ProofMessage(std::string_view nonce, std::string_view epoch, std::string_view prover_id) {
  std::string message("kvpeer-v1");
  for (std::string_view field : {nonce, epoch, prover_id}) {
    message.push_back('\0');
    message.append(field);
  }
  return message;
}

}  // namespace

std::string PskProof(std::string_view psk, std::string_view nonce, std::string_view epoch,
                     std::string_view prover_id) {
  const std::string message = ProofMessage(nonce, epoch, prover_id);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  // A PSK file is small (the daemon reads it whole), so its size fits an int.
  const int key_len = psk.size() > INT_MAX ? INT_MAX : static_cast<int>(psk.size());
  if (HMAC(EVP_sha256(), psk.data(), key_len, reinterpret_cast<const unsigned char*>(message.data()),
           message.size(), mac, &mac_len) == nullptr) {
    // Only an OpenSSL failure gets here; an empty proof never matches a real one.
    return {};
  }
  return protocol::ToHex(std::string_view(reinterpret_cast<const char*>(mac), mac_len));
}

bool ProofsEqual(std::string_view expected, std::string_view received) {
  // The length of a valid proof is public (64 hex digits), so checking it
  // first leaks nothing.
  if (expected.empty() || expected.size() != received.size()) return false;
  return CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

}  // namespace kvpeer::session
