#include "base/random_token.h"

#include <openssl/rand.h>

#include <string_view>

#include "base/hex.h"

namespace kvpeer {

std::optional<std::string> CsprngToken() {
  unsigned char bytes[kTokenBytes];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return std::nullopt;
  return ToHex(std::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
}

std::optional<std::string> NonZeroToken(const TokenSource& source) {
  for (;;) {
    std::optional<std::string> token = source();
    if (!token || token->find_first_not_of('0') != std::string::npos) return token;
  }
}

}  // namespace kvpeer
