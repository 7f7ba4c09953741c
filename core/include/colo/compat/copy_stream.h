#pragma once

#include <c10/core/Stream.h>
#include <torch/types.h>

#include <memory>
#include <optional>

namespace c10 {
class Event;
}

namespace colo::compat {

// Marks the completion of work queued on a device stream (a CUDA event); a default-constructed
// one, or one for a CPU device, is complete at once.
class StreamEvent {
 public:
  StreamEvent() = default;
  // Complete once the work queued now on `device`'s current stream is done.
  static StreamEvent on_current_stream(const torch::Device& device);

  // Blocks the calling thread until the work is done.
  void wait() const;
  // Makes `device`'s current stream wait for the work (no host blocking).
  void block_current_stream(const torch::Device& device) const;
  bool pending() const { return event_ != nullptr; }

 private:
  friend class CopyStream;
  std::shared_ptr<c10::Event> event_;
};

// A stream of its own for host↔device copies of one GPU, so that transfers run beside the
// computation instead of in its queue (a copy on the compute stream holds back every kernel
// queued after it). For a CPU device it is a plain synchronous copy.
class CopyStream {
 public:
  explicit CopyStream(const torch::Device& device);

  const torch::Device& device() const { return device_; }
  // dst.copy_(src) once the work queued now on the current stream is done (src or dst is
  // usually produced there), on this stream, asynchronously where one side is pinned host
  // memory. The device memory involved stays reserved until the copy is done. Returns the copy's
  // completion.
  StreamEvent copy(const torch::Tensor& dst, const torch::Tensor& src);

 private:
  torch::Device device_;
  std::optional<c10::Stream> side_;  // CUDA devices only
};

}  // namespace colo::compat
