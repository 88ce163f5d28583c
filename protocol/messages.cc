#include "protocol/messages.h"

#include "protocol/type_names.h"

namespace kvpeer::protocol {

std::string_view TypeName(const Message& message) {
  if (const auto* unknown = std::get_if<Unknown>(&message)) return unknown->type;
  // Only reachable after an exception interrupted an assignment; never index
  // past the table.
  if (message.valueless_by_exception()) return {};
  return kKnownTypeNames[message.index()];
}

}  // namespace kvpeer::protocol
