#pragma once

#include <fmt/format.h>

#include <string>

namespace colo::dist {

// The line Logger writes: "[rank R] LEVEL message" in a world of several ranks, without the rank
// where the launcher prefixes every line with it already (colo-run does unless --no-prefix, and
// says so in COLO_RUN_PREFIXES_OUTPUT=1): one "[rank R] ", never two.
std::string log_line(int rank, int world_size, const char* level, const std::string& message, bool launcher_prefixes);
inline constexpr const char* kLauncherPrefixesVariable = "COLO_RUN_PREFIXES_OUTPUT";

// Writes lines prefixed with the rank ("[rank 1] ...") to stderr, whole lines at a time so
// that ranks' output does not interleave mid-line.
class Logger {
 public:
  explicit Logger(int rank = 0, int world_size = 1) : rank_(rank), world_size_(world_size) {}

  template <typename... Args>
  void info(fmt::format_string<Args...> format, Args&&... args) const {
    write("INFO", fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args) const {
    write("WARN", fmt::format(format, std::forward<Args>(args)...));
  }
  void write(const char* level, const std::string& message) const;

 private:
  int rank_;
  int world_size_;
};

}  // namespace colo::dist
