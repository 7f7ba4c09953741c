#pragma once

#include <colo/dist/logger.h>

#include <fmt/format.h>

#include <memory>
#include <string>

namespace colo::dist {

class ProcessGroup;

// Who speaks for the job: rank 0 of the world is the master. Prints on the master only (to
// stdout, flushed) and logs with the rank prefix everywhere.
class Coordinator {
 public:
  explicit Coordinator(std::shared_ptr<ProcessGroup> world);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_master() const { return rank_ == 0; }
  const Logger& logger() const { return logger_; }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

  template <typename... Args>
  void print_on_master(fmt::format_string<Args...> format, Args&&... args) const {
    if (is_master()) print_line(fmt::format(format, std::forward<Args>(args)...));
  }
  // Blocks every rank until all arrive.
  void barrier() const;

 private:
  static void print_line(const std::string& line);
  std::shared_ptr<ProcessGroup> world_;
  int rank_;
  int world_size_;
  Logger logger_;
};

}  // namespace colo::dist
