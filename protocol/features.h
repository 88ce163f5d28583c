// Names of the optional features of wire-protocol.md section 7, and the set a
// node offers by default. A feature is on for a connection only when both
// connects list it (session/internal/handshake.h negotiates).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvpeer::protocol {

// Per-block XXH3-64 checksums in block_data.xxh3.
inline constexpr std::string_view kFeatureXxh3 = "xxh3";

// Every feature this implementation supports: what a node lists in its
// connect unless its configuration turns some off (config `features`).
inline std::vector<std::string> SupportedFeatures() { return {std::string(kFeatureXxh3)}; }

}  // namespace kvpeer::protocol
