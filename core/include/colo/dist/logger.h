#pragma once

#include <fmt/format.h>

#include <string>

namespace colo::dist {

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
