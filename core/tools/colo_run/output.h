#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <string_view>

// colo-run's own writes to its stdout and stderr. They never throw and never raise SIGPIPE
// (colo-run ignores it while it runs): fmt::print(stderr, ...) throws std::system_error when the
// reader of a pipe is gone (`colo-run ... 2>&1 | head -1`), and an exception there would end
// colo-run before it stopped its ranks. What cannot be written is dropped.
namespace colo::launcher {

enum class WriteResult {
  kWritten,
  kReaderGone,  // EPIPE: the pipe's reader exited; nothing more will ever be read
  kFailed,      // another error (a full disk, EIO); the bytes were dropped
};

// Writes all of `bytes` to `fd`, riding out EINTR and a non-blocking descriptor inherited from
// the caller.
WriteResult write_all(int fd, std::string_view bytes);

// One message for the user (a whole line, newline included), formatted first and written with
// one write() so that it does not interleave with the ranks' forwarded lines.
template <typename... Args>
void print_to(int fd, fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    write_all(fd, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {  // out of memory while formatting: the message is lost, colo-run goes on
  }
}

}  // namespace colo::launcher
