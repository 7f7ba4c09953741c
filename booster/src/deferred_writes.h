#pragma once

#include <functional>
#include <vector>

namespace colo::detail {

// The file writes of one asynchronous save (Booster::save_state with SaveOptions::async), queued
// at the step boundary by the CheckpointIO (CheckpointIO::defer_writes_to) and run by the
// background writer. Each closure owns host copies of what it writes.
struct DeferredWrites {
  // Copies go to pinned host memory (the state is on a CUDA device).
  bool pinned = false;
  // This rank's files, in order.
  std::vector<std::function<void()>> local;
  // World rank 0's writes that need every rank's files in: run after the writer has seen every
  // rank's part finished (Booster::save_state's marker, an index of parts).
  std::vector<std::function<void()>> after_every_rank;
};

}  // namespace colo::detail

#include <atomic>
#include <chrono>
#include <string>

namespace colo::detail {

// The background writer's job: this rank's writes in order; then, when `every_rank_done` is not
// empty (world rank 0), waits until each of those files exists — each rank writes its own last —
// for at most `timeout` after its own writes, and runs the writes that need every rank's part.
// Throws when a write fails, or a rank's file does not appear in time (naming the file) or before
// `cancelled`.
void run_deferred_writes(const DeferredWrites& writes, const std::vector<std::string>& every_rank_done,
                         std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled);

}  // namespace colo::detail
