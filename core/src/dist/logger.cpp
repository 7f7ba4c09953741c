#include <colo/dist/logger.h>
#include <colo/env/variables.h>

#include <cstdio>

namespace colo::dist {

std::string log_line(int rank, int world_size, const char* level, const std::string& message, bool launcher_prefixes) {
  return world_size > 1 && !launcher_prefixes ? fmt::format("[rank {}] {} {}\n", rank, level, message)
                                               : fmt::format("{} {}\n", level, message);
}

void Logger::write(const char* level, const std::string& message) const {
  // One write per line: concurrent ranks sharing a terminal then interleave whole lines only. A
  // bad value reads as "not prefixed": a log line must never throw.
  const auto prefixed = env::text(kLauncherPrefixesVariable);
  const std::string line = log_line(rank_, world_size_, level, message, prefixed && *prefixed == "1");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace colo::dist
