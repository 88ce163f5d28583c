#include "daemon/node/node_epoch.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <optional>
#include <utility>

#include "base/random_token.h"

namespace kvpeer::daemon {

std::string RandomEpoch() {
  std::optional<std::string> epoch = NonZeroToken(CsprngToken);
  if (!epoch) {
    spdlog::critical("cannot start: no random epoch, the CSPRNG (OpenSSL RAND_bytes) failed");
    std::abort();
  }
  return std::move(*epoch);
}

}  // namespace kvpeer::daemon
