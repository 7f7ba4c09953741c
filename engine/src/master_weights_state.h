#pragma once

// What every engine with fp32 master weights does with them in checkpoints, once: find a working
// weight's master, put the masters in place of the working weights in a model's state (checkpoints
// keep fp32 values), write saved values back into them; and the one output rule of every model half.
#include <colo/amp/master_weights.h>
#include <colo/nn/layer_stack.h>
#include <torch/torch.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace colo::detail {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The fp32 master of each working weight, keyed by the working tensor's identity.
std::unordered_map<const void*, torch::Tensor> masters_by_working(const amp::MasterWeights& masters);

// `module`'s canonical parameter names with their masters, in canonical order (parameters without
// a master left out).
NamedTensors named_masters(const nn::LayerStack& module, const amp::MasterWeights& masters);

// Each entry of `state` that has a master in `masters` (by name) replaced by the master, detached.
void overlay_masters(NamedTensors& state, const NamedTensors& masters);

// Copies into each of `masters` its value in `state` (checked beforehand: every name is there), the
// saved values themselves, not their rounding to the working dtype.
void load_masters(const NamedTensors& state, const NamedTensors& masters);

// A model half's output as the user's criterion gets it: fp32 when floating (the loss in fp32
// whatever the compute dtype; fp16's loss scale alone exceeds fp16's range).
inline torch::Tensor fp32_output(const torch::Tensor& output) {
  return output.is_floating_point() ? output.to(torch::kFloat) : output;
}

}  // namespace colo::detail
