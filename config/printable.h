// Printable: a string a peer or an engine supplied (peer ids, reasons,
// client names, kv_request_ids, paths), made safe to write to a log line or
// a terminal (the control API spec, section 4: "Strings a peer or an engine
// supplied are shown with control characters escaped"; docs/security.md,
// "Control socket and engines").
//
// Bytes 0x00..0x1f, 0x7f and 0x80..0xff become \xNN and a backslash becomes
// \\, so the result is printable ASCII, cannot move the cursor, recolour a
// terminal or forge a log line, and still tells the original bytes apart.
// (Bytes >= 0x80 are escaped too: UTF-8 C1 controls such as U+009B are
// terminal controls, and an escape is cheaper to trust than a decoder.)
//
// Shared by the daemon (logs) and kvpeerctl (its human output).
#pragma once

#include <string>
#include <string_view>

namespace kvpeer::config {

std::string Printable(std::string_view text);

}  // namespace kvpeer::config
