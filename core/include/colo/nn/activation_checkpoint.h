#pragma once

#include <torch/types.h>

namespace colo::nn {

class Layer;

// Activation checkpointing for one layer (what torch.utils.checkpoint does with use_reentrant):
// the forward pass runs without keeping the layer's activations, only its input; backward runs
// the layer's forward again from that input, with gradients on, and back-propagates through it,
// accumulating into the layer's parameters as usual. The replay draws the same random numbers
// (the default CPU and CUDA generators and every region stream of the layer's modules are put
// back where they were), so results equal those of the plain pass exactly in fp32.
//
// The nested backward pass runs inside a compat::NestedBackwardScope: gradient hooks fire during
// it, but end-of-backward callbacks (bucketed gradient reduction) wait for the program's pass.
//
// Without gradients (evaluation), or when `x` needs none (the first layer: there is no graph to
// recompute into), the layer simply runs.
torch::Tensor checkpointed_forward(Layer& layer, const torch::Tensor& x);

}  // namespace colo::nn
