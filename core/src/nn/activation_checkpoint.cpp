#include "colo/nn/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <colo/compat/backward_callbacks.h>
#include <colo/compat/torch_compat.h>
#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "colo/nn/layer.h"
#include "colo/nn/region_rng.h"

namespace colo::nn {
namespace {

// Every random stream the layer's forward pass may draw from, as it is now.
struct RandomState {
  torch::Tensor cpu;
  torch::Tensor cuda;
  std::vector<RegionRng*> regions;
  std::vector<std::vector<torch::Tensor>> region_states;

  static RandomState capture(Layer& layer, const torch::Device& device) {
    RandomState s;
    s.cpu = at::detail::getDefaultCPUGenerator().get_state();
    if (device.is_cuda()) s.cuda = compat::cuda_rng_state(device);
    std::unordered_set<RegionRng*> seen;
    for (const auto& module : layer.modules(/*include_self=*/true)) {
      const auto* user = dynamic_cast<const UsesRegionRng*>(module.get());
      RegionRng* rng = user ? user->region_rng() : nullptr;
      if (rng && seen.insert(rng).second) {
        s.regions.push_back(rng);
        s.region_states.push_back(rng->save_state());
      }
    }
    return s;
  }

  void restore(const torch::Device& device) const {
    auto generator = at::detail::getDefaultCPUGenerator();  // a handle; copies share state
    generator.set_state(cpu);
    if (cuda.defined()) compat::set_cuda_rng_state(device, cuda);
    for (std::size_t i = 0; i < regions.size(); ++i) regions[i]->restore_state(region_states[i]);
  }
};

// Puts the streams where `replay` says for the replay and back where they are now afterwards:
// the replay must not move the random state the rest of the backward pass (or the next step) sees.
class ReplayRandomState {
 public:
  ReplayRandomState(Layer& layer, const torch::Device& device, const RandomState& replay)
      : device_(device), now_(RandomState::capture(layer, device)) {
    replay.restore(device_);
  }
  ~ReplayRandomState() { now_.restore(device_); }
  ReplayRandomState(const ReplayRandomState&) = delete;
  ReplayRandomState& operator=(const ReplayRandomState&) = delete;

 private:
  torch::Device device_;
  RandomState now_;
};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The layer travels as its address (an IValue holds no C++ object): a layer outlives the graphs
// built from it, as every module does.
class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t layer_address) {
    auto& layer = *reinterpret_cast<Layer*>(static_cast<intptr_t>(layer_address));
    auto state = RandomState::capture(layer, x.device());
    ctx->saved_data["layer"] = layer_address;
    ctx->saved_data["cpu_rng"] = state.cpu;
    if (state.cuda.defined()) ctx->saved_data["cuda_rng"] = state.cuda;
    for (std::size_t i = 0; i < state.region_states.size(); ++i) {
      ctx->saved_data["region" + std::to_string(i)] = c10::List<torch::Tensor>(state.region_states[i]);
    }
    ctx->save_for_backward({x});
    return layer.forward(x);  // autograd is off in a custom function's forward: nothing is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& layer = *reinterpret_cast<Layer*>(static_cast<intptr_t>(ctx->saved_data["layer"].toInt()));
    const auto x = ctx->get_saved_variables()[0];
    // The state to replay: the one captured in forward, matched to the layer's streams by order.
    auto replay = RandomState::capture(layer, x.device());
    replay.cpu = ctx->saved_data["cpu_rng"].toTensor();
    if (ctx->saved_data.count("cuda_rng")) replay.cuda = ctx->saved_data["cuda_rng"].toTensor();
    for (std::size_t i = 0; i < replay.regions.size(); ++i) {
      replay.region_states[i] = ctx->saved_data["region" + std::to_string(i)].toTensorVector();
    }
    auto input = x.detach().requires_grad_(true);
    torch::Tensor output;
    {
      ReplayRandomState random(layer, x.device(), replay);
      torch::AutoGradMode grad_mode(true);
      output = layer.forward(input);
    }
    if (!output.requires_grad()) {
      throw std::logic_error("activation checkpointing: the recomputed layer output needs no gradient");
    }
    {
      compat::NestedBackwardScope nested;
      torch::autograd::backward({output}, {grads[0]});
    }
    return {input.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_forward(Layer& layer, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return layer.forward(x);
  return CheckpointFunction::apply(x, static_cast<int64_t>(reinterpret_cast<intptr_t>(&layer)));
}

}  // namespace colo::nn
