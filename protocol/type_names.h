// Wire `type` strings of the known messages, in the order of the Message
// variant's alternatives. One table serves TypeName (encoding) and the
// decoder's dispatch, so a name can never differ between the two.
#pragma once

#include <array>
#include <string_view>
#include <type_traits>
#include <variant>

#include "protocol/messages.h"

namespace kvpeer::protocol {

inline constexpr std::array<std::string_view, 12> kKnownTypeNames = {
    "connect",     "connect_ack", "disconnect", "ping",          "pong",        "lookup",
    "lookup_resp", "fetch",       "block_data", "transfer_done", "abort_fetch", "abort_ack",
};

// Unknown is the last alternative and has no fixed name.
static_assert(kKnownTypeNames.size() + 1 == std::variant_size_v<Message>);
static_assert(std::is_same_v<std::variant_alternative_t<kKnownTypeNames.size(), Message>, Unknown>);

}  // namespace kvpeer::protocol
