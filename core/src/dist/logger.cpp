#include <colo/dist/logger.h>

#include <cstdio>

namespace colo::dist {

void Logger::write(const char* level, const std::string& message) const {
  // One write per line: concurrent ranks sharing a terminal then interleave whole lines only.
  const std::string line = world_size_ > 1 ? fmt::format("[rank {}] {} {}\n", rank_, level, message)
                                           : fmt::format("{} {}\n", level, message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace colo::dist
