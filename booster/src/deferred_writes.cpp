#include "deferred_writes.h"

#include <colo/files/files.h>
#include <fmt/format.h>

#include <stdexcept>
#include <thread>

namespace colo::detail {

void run_deferred_writes(const DeferredWrites& writes, const std::vector<std::string>& every_rank_done,
                         std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled) {
  for (const auto& write : writes.local) write();
  if (every_rank_done.empty()) return;
  // The ranks' writers share no process group with this thread (the training thread uses it), so
  // they meet through the files: each rank's last file is written atomically, after the others.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& path : every_rank_done) {
    while (!files::exists(path)) {
      if (cancelled) throw std::runtime_error(fmt::format("asynchronous save: abandoned while waiting for {}", path));
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error(fmt::format(
            "asynchronous save: {} did not appear within {} ms of this rank's own writes, so that rank's writer "
            "failed or is stuck (its error says why); the state was not completed, the previous one stays the "
            "latest (raise COLO_TIMEOUT_MS if the file system is that slow)",
            path, timeout.count()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  for (const auto& write : writes.after_every_rank) write();
}

}  // namespace colo::detail
