#pragma once

#include <colo/nn/layer_stack.h>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace colo::nn {

struct CudaGraphOptions {
  // Eager forward + backward passes (through autograd::grad: the parameters' gradients are not
  // touched) before a capture, so that cuBLAS/cuDNN plans and the allocator's state are settled.
  TORCH_ARG(int, warmup_iterations) = 2;
  // Distinct training input shapes captured (one forward + backward graph pair each); a further
  // shape is an error, since each capture holds its own activations' memory.
  TORCH_ARG(int, max_shapes) = 4;
};

// Why CUDA graphs cannot run a stack on `device` in this build (a CPU device, a build without
// CUDA), or nullopt when they can.
std::optional<std::string> cuda_graphs_unavailable_reason(const torch::Device& device);

// A layer stack whose training forward and backward are CUDA graphs (issue 44: at small
// microbatches the CPU's cost of launching each kernel, not the GPU, sets the pace; a replay is
// one launch). The pattern of PyTorch's make_graphed_callables: per input shape, after a few
// eager warm-up passes, one graph captures the forward from a static input buffer and one the
// backward from a static output-gradient buffer; forward() copies the input in and replays, the
// backward replays and the parameters' gradients are accumulated inside the backward graph
// into fixed buffers, which become the parameters' .grad (so autograd adds nothing per
// parameter, and a zero_grad that drops gradients costs one zero fill at the next backward).
//
// Results are those of the eager stack: the same kernels on the same data. What a graph cannot
// hold is refused at construction or capture, never silently changed:
//  - each training forward's backward must run before the next training forward (replays share
//    their activations' memory): gradient accumulation and a one-stage pipeline's 1F1B do this;
//  - activation checkpointing (it reads the host-side random state in forward);
//  - gradient hooks on the parameters (a data-parallel reducer) do not fire: the caller
//    reduces after backward, or does not use graphs;
//  - evaluation (no grad mode, or the stack in eval mode) runs the stack eagerly.
class CudaGraphedStack {
 public:
  explicit CudaGraphedStack(std::shared_ptr<LayerStack> stack, CudaGraphOptions options = {});
  ~CudaGraphedStack();
  CudaGraphedStack(const CudaGraphedStack&) = delete;
  CudaGraphedStack& operator=(const CudaGraphedStack&) = delete;

  torch::Tensor forward(const torch::Tensor& input);

  LayerStack& stack() { return *stack_; }
  // How many input shapes have been captured, and how many forward replays ran.
  int64_t captured_shapes() const;
  int64_t forward_replays() const;

  struct Impl;

 private:
  std::shared_ptr<LayerStack> stack_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace colo::nn
