// One sendmsg that carries a file descriptor with its bytes (SCM_RIGHTS):
// how an engine hands its region to the daemon (control-api.md
// `register_region` with `fd: true`: the descriptor travels with the line's
// first byte). Client uses it; engines with an event loop of their own (a
// non-blocking socket) can call it directly.
#pragma once

#include <string_view>
#include <sys/types.h>

namespace kvpeer {

// sendmsg(socket, bytes, flags | MSG_NOSIGNAL) with `fd` attached when
// fd >= 0. Returns what sendmsg returns (bytes sent, or -1 with errno set);
// a short send has sent the descriptor with the first byte all the same.
ssize_t SendWithDescriptor(int socket, std::string_view bytes, int fd, int flags = 0);

}  // namespace kvpeer
