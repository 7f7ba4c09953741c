#pragma once

#include <colo/nn/layer_stack.h>

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace colo::nn {

struct CudaGraphOptions {
  // Eager forward + backward passes (through autograd::grad: the parameters' gradients are not
  // touched) before a capture, so that cuBLAS/cuDNN plans and the allocator's state are settled.
  TORCH_ARG(int, warmup_iterations) = 2;
  // Distinct training input shapes captured (a forward + backward graph pair each, in every
  // slot the shape runs in); a further shape is an error, since each capture holds memory.
  TORCH_ARG(int, max_shapes) = 4;
  // Training forwards whose backward has not run yet that may be in flight at once. Each holds a
  // capture slot of its own (per input shape: its graphs, static buffers and a memory pool that
  // no other slot's replays touch), captured when first needed. 1: each forward's backward
  // before the next forward (gradient accumulation); a pipeline stage needs as many as its
  // schedule holds microbatches (pipeline::peak_in_flight).
  TORCH_ARG(int, max_in_flight) = 1;
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
//  - at most max_in_flight training forwards may await their backward (each has its own slot;
//    one more is an error naming the option, not an overwrite of a slot's activations);
//  - activation checkpointing (it reads the host-side random state in forward);
//  - gradient hooks on the parameters (a data-parallel reducer) do not fire: the caller reduces
//    after backward (on_backward_end, or after the step), or does not use graphs;
//  - evaluation (no grad mode, or the stack in eval mode) runs the stack eagerly.
// A forward's output is a copy, not the slot's static buffer, so it stays valid however the
// slot is used afterwards; an input that requires a gradient gets it from the backward graph.
class CudaGraphedStack {
 public:
  explicit CudaGraphedStack(std::shared_ptr<LayerStack> stack, CudaGraphOptions options = {});
  ~CudaGraphedStack();
  CudaGraphedStack(const CudaGraphedStack&) = delete;
  CudaGraphedStack& operator=(const CudaGraphedStack&) = delete;

  torch::Tensor forward(const torch::Tensor& input);

  // Changes CudaGraphOptions::max_in_flight (>= 1; a pipeline sets it from its schedule, whose
  // microbatch count may be known only at the first step). Slots already captured stay.
  void set_max_in_flight(int slots);
  // Runs `fn` at the end of every autograd pass that replayed a backward graph, once per pass,
  // after all its gradients are in: what the parameters' gradient hooks, which a replay does not
  // fire, would have done (a data-parallel all-reduce when sync is on). Empty: nothing.
  void on_backward_end(std::function<void()> fn);

  LayerStack& stack() { return *stack_; }
  // Input shapes captured, forward/backward graph pairs captured (a shape in each slot it ran
  // in), training forwards awaiting their backward now, and forward replays so far.
  int64_t captured_shapes() const;
  int64_t captured_graphs() const;
  int64_t in_flight() const;
  int64_t forward_replays() const;

  struct Impl;

 private:
  std::shared_ptr<LayerStack> stack_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace colo::nn
