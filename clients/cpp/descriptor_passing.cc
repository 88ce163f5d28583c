#include "kvpeer/descriptor_passing.h"

#include <sys/socket.h>

#include <cstring>

namespace kvpeer {

ssize_t SendWithDescriptor(int socket, std::string_view bytes, int fd, int flags) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  return ::sendmsg(socket, &message, flags | MSG_NOSIGNAL);
}

}  // namespace kvpeer
