#include <colo/dist/coordinator.h>
#include <colo/dist/logger.h>
#include <colo/dist/process_group.h>

#include <cstdio>
#include <iostream>

namespace colo::dist {

void Logger::write(const char* level, const std::string& message) const {
  // One write per line: concurrent ranks sharing a terminal then interleave whole lines only.
  const std::string line = world_size_ > 1 ? fmt::format("[rank {}] {} {}\n", rank_, level, message)
                                           : fmt::format("{} {}\n", level, message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

Coordinator::Coordinator(std::shared_ptr<ProcessGroup> world)
    : world_(std::move(world)),
      rank_(world_->rank()),
      world_size_(world_->size()),
      logger_(rank_, world_size_) {}

void Coordinator::barrier() const { world_->barrier().wait(); }

void Coordinator::print_line(const std::string& line) {
  std::cout << line << std::endl;
}

}  // namespace colo::dist
