#pragma once

// What node_link.cpp and node_link_connect.cpp share: one connection to another node's colo-run
// (NodeLink::Peer), read a line at a time, and the clock the deadlines are kept on.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "node_link.h"

namespace colo::launcher::node_link_detail {

using Clock = std::chrono::steady_clock;

// A line longer than this is not the protocol's: the connection is dropped.
constexpr std::size_t kMaxLine = 64 * 1024;

inline int milliseconds_until(std::optional<Clock::time_point> deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, left));
}

inline std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace colo::launcher::node_link_detail

namespace colo::launcher {

struct NodeLink::Peer {
  int node = 0;
  int fd = -1;
  std::string buffer;  // bytes read past the last whole line
  bool lost = false;
  std::optional<NodeReport> done;  // node 0: the node's report of the current attempt
  bool stop_sent = false;
  int slots = 0;      // node 0: the ranks the node can start (its hello, then each report)
  int local = 0;      // node 0: the ranks it runs in the current attempt
  bool out = false;   // node 0, --elastic: left out of the job for good

  // One whole line if the buffer holds one.
  std::optional<std::string> take_line() {
    const auto end = buffer.find('\n');
    if (end == std::string::npos) return std::nullopt;
    std::string line = buffer.substr(0, end);
    buffer.erase(0, end + 1);
    return line;
  }
  // Reads what is there (once). False at end of file or on an error.
  bool fill() {
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<std::size_t>(n));
      return buffer.size() <= node_link_detail::kMaxLine || buffer.find('\n') != std::string::npos;
    }
  }
  // Blocks (until `deadline`) for the next line; nullopt at end of file, on an error or at the deadline.
  std::optional<std::string> read_line(std::optional<node_link_detail::Clock::time_point> deadline) {
    for (;;) {
      if (auto line = take_line()) return line;
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, node_link_detail::milliseconds_until(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      if (!fill()) return std::nullopt;
    }
  }
};

}  // namespace colo::launcher
