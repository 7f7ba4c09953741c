#include "output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace colo::launcher {

WriteResult write_all(int fd, std::string_view bytes) {
  const char* data = bytes.data();
  std::size_t size = bytes.size();
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return n < 0 && errno == EPIPE ? WriteResult::kReaderGone : WriteResult::kFailed;
    }
  }
  return WriteResult::kWritten;
}

}  // namespace colo::launcher
