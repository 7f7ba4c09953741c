#pragma once

#include <colo/compat/copy_stream.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace colo::zero {

struct PinnedStagingOptions {
  // Bytes the largest transfer needs (a chunk in its dtype): every slot has this size.
  TORCH_ARG(int64_t, slot_bytes) = 0;
  // Slots in the pool; a transfer that finds none free waits for one. The pool's pinned memory is
  // slots × slot_bytes at most, allocated as transfers need it: never one block for a whole state.
  TORCH_ARG(int64_t, slots) = 4;
  // Pinned host memory (page-locked: copies run asynchronously, at full bus speed); off, plain
  // host memory (copies block the host while they run).
  TORCH_ARG(bool, pin_memory) = true;
};

// Host↔device transfers of one GPU through a bounded pool of staging buffers in pinned host
// memory, on a copy stream of their own (compat::CopyStream), so that offloaded state moves
// while the GPU computes:
//   download: a device tensor (a chunk's reduced gradients) is copied into a slot once the work
//       queued now on the current stream has produced it; a worker thread waits for the copy,
//       hands the host copy to a callback (adding it into a host gradient shard) and frees the slot.
//   upload: the caller fills a slot (rounding an updated fp32 master to bf16, say), which is
//       copied into a device tensor; the slot is free again once the copy is done.
// finish() waits for every callback and makes the current stream wait for every upload.
// For a CPU device nothing is staged: download hands the tensor itself to the callback at once,
// upload fills a host tensor and copies it.
class PinnedStaging {
 public:
  PinnedStaging(const torch::Device& device, PinnedStagingOptions options);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  void download(const torch::Tensor& src, std::function<void(const torch::Tensor& host)> then);
  void upload(const torch::Tensor& dst, const std::function<void(const torch::Tensor& host)>& fill);
  // Rethrows the first failure of a callback.
  void finish();

  const torch::Device& device() const { return copies_.device(); }
  // Pinned (or staging) host memory allocated now.
  int64_t staging_bytes() const;

 private:
  struct Slot {
    torch::Tensor buffer;           // slot_bytes bytes
    compat::StreamEvent in_flight;  // an upload that must end before the slot is written again
  };
  struct Task {
    std::size_t slot;
    torch::Tensor host;
    compat::StreamEvent arrived;
    std::function<void(const torch::Tensor&)> then;
  };

  std::size_t acquire();
  void release(std::size_t slot);
  torch::Tensor view(std::size_t slot, c10::ScalarType dtype, int64_t numel);
  void work();

  PinnedStagingOptions options_;
  compat::CopyStream copies_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Slot> slots_;
  std::vector<std::size_t> free_;
  std::deque<Task> tasks_;
  bool busy_ = false;  // the worker is running a task
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::vector<compat::StreamEvent> uploads_;
  std::thread worker_;
};

}  // namespace colo::zero
