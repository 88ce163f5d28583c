#include "daemon/random_token.h"

#include <sys/random.h>

#include <cstdlib>
#include <string_view>

#include "base/hex.h"

namespace kvpeer::daemon {

std::string RandomNonce() {
  char bytes[16];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0) std::abort();
    filled += static_cast<size_t>(n);
  }
  return ToHex(std::string_view(bytes, sizeof(bytes)));
}

std::string RandomEpoch() {
  for (;;) {
    std::string token = RandomNonce();
    if (token.find_first_not_of('0') != std::string::npos) return token;
  }
}

}  // namespace kvpeer::daemon
