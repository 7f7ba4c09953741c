// Side CUDA streams, for work that may run while the current stream still waits for something
// else (the optimizer updating one gradient bucket while the next is still being all-reduced).
// Off CUDA (the CPU build, or CPU tensors) both types are inert: work runs in program order.
#pragma once

#include <torch/types.h>

#include <memory>

namespace colo::compat {

// A point in a device's current stream (a CUDA event recorded there). A stream that waits for
// it runs what it is given next only after everything queued before the mark.
class StreamMark {
 public:
  StreamMark() = default;  // marks nothing: waiting for it is a no-op
  // Inert for a device that is not CUDA.
  static StreamMark here(const torch::Device& device);
  // The device's current stream waits for the mark (the host does not).
  void make_current_stream_wait() const;

 private:
  std::shared_ptr<void> event_;  // an at::cuda::CUDAEvent, kept out of this header
};

// While it lives, the device's current stream is a stream from LibTorch's pool, which first
// waits for `after`; what the caller queues meanwhile runs there. At its end the stream that was
// current before waits for all of it, and is current again: later work on it sees the results.
//
// Tensors allocated inside the scope come from the side stream's memory pool; the caller keeps
// those that outlive it alive (optimizer state, master gradients) or orders their later users.
class SideStreamScope {
 public:
  SideStreamScope(const torch::Device& device, const StreamMark& after);
  ~SideStreamScope();
  SideStreamScope(const SideStreamScope&) = delete;
  SideStreamScope& operator=(const SideStreamScope&) = delete;

 private:
  struct Streams;
  std::unique_ptr<Streams> streams_;  // null off CUDA
};

}  // namespace colo::compat
