#pragma once

#include <string>

// The few POSIX helpers colo-run needs beyond colo::files (colo/files/files.h, shared with
// libcolo_core): errno and signal names for its messages.
namespace colo::launcher {

// strerror(err) as a std::string.
std::string errno_text(int err);

// "SIGTERM" for SIGTERM; "unknown signal" for a number it does not name.
const char* signal_name(int sig);

}  // namespace colo::launcher
