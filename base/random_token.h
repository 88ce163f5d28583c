// Fresh random tokens: the node's epoch and the nonces of the handshake and
// of pings, 16 bytes each as 32 lowercase hex digits.
//
// A failure to get randomness is a value (nullopt), never a fixed token: a
// predictable nonce would void the PSK handshake (docs/security.md,
// "Pre-shared key"). So every user is handed a TokenSource (sessions take
// one as a required setting, tests a deterministic one) and decides what a
// failure means.
//
// Thread-safety: CsprngToken may be called from any thread (OpenSSL's
// generator is thread-safe); NonZeroToken as its source allows.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace kvpeer {

inline constexpr size_t kTokenBytes = 16;

// Returns a fresh token, or nullopt when no randomness could be had.
using TokenSource = std::function<std::optional<std::string>()>;

// A token from OpenSSL's CSPRNG (RAND_bytes); nullopt if it fails.
std::optional<std::string> CsprngToken();

// A token from `source` that is not all zeros (an epoch never is: wire
// spec, "Framing"), or nullopt as soon as the source fails.
std::optional<std::string> NonZeroToken(const TokenSource& source);

}  // namespace kvpeer
