#pragma once

#include <torch/types.h>

#include <functional>
#include <utility>
#include <vector>

namespace colo::dist {

// Gloo's send and recv give a tensor's memory to Gloo's transport threads, which read and write
// it as plain host memory: they take contiguous CPU tensors only. (Gloo's collectives copy CUDA
// tensors through host memory themselves; its point-to-point operations do not, and would read a
// device pointer as a host one.) For one operation or batch, HostStaging puts a contiguous host
// tensor in the place of each tensor that is not one:
//  - outgoing(t): a host copy of t, taken now on the current CUDA stream and waited for, so it
//    holds what the work queued before it computed, and Gloo may read it from any thread;
//  - incoming(t): a host buffer to receive into; finish() copies it into t on the current CUDA
//    stream and waits for the copy, so that t holds the data wherever it is read next.
// A contiguous CPU tensor is returned as it is (CPU ranks pay nothing). Host copies of CUDA
// tensors are pinned (LibTorch's caching host allocator: cheap after the first use).
class HostStaging {
 public:
  // Whether `tensor` must travel through a host copy.
  static bool needed_for(const torch::Tensor& tensor) { return !tensor.is_cpu() || !tensor.is_contiguous(); }

  torch::Tensor outgoing(const torch::Tensor& tensor);
  torch::Tensor incoming(const torch::Tensor& tensor);

  // Whether some incoming() tensor waits for finish().
  bool has_arrivals() const { return !arrivals_.empty(); }
  // Copies every staged arrival into its tensor (once the transfers are complete).
  void finish() const;
  // finish() as a Work's completion step; empty when there is nothing to copy.
  std::function<void()> completion() const;

 private:
  std::vector<std::pair<torch::Tensor, torch::Tensor>> arrivals_;  // (destination, host buffer)
};

}  // namespace colo::dist
