// UTF-8 text cut to a byte bound without splitting a character.
//
// Messages that quote a peer's or an engine's text (disconnect reasons,
// control-API errors) must stay within a byte bound and still be valid
// UTF-8, so a cut never lands inside a multi-byte sequence. The input is
// assumed to be valid UTF-8 (Boost.JSON and the frame decoder have checked
// it); for other bytes the result is still bounded.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvpeer {

// At most `max_bytes` of `text`, never cutting a UTF-8 character in half.
std::string Utf8Prefix(std::string_view text, size_t max_bytes);

}  // namespace kvpeer
