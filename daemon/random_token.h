// Fresh random 16-byte tokens as 32 lowercase hex digits (epochs, nonces).
#pragma once

#include <string>

namespace kvpeer::daemon {

// From the kernel's CSPRNG (getrandom); aborts if it is unavailable, since
// predictable nonces would void the PSK handshake.
std::string RandomNonce();
// Like RandomNonce, but never all zeros (wire spec: an epoch never is).
std::string RandomEpoch();

}  // namespace kvpeer::daemon
