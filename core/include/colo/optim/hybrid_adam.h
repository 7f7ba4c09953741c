#pragma once

#include <colo/optim/adam_moments_param_state.h>
#include <torch/torch.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace colo::optim {

// Options of one parameter group (TORCH_ARG style: HybridAdamOptions(3e-4).weight_decay(0.05)).
struct HybridAdamOptions : public torch::optim::OptimizerCloneableOptions<HybridAdamOptions> {
  HybridAdamOptions(double lr = 1e-3);  // NOLINT(google-explicit-constructor): torch's options idiom
  TORCH_ARG(double, lr) = 1e-3;
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0.0;
  // true: AdamW, decoupled weight decay (param *= 1 - lr * weight_decay, then the Adam step).
  // false: Adam with L2 regularisation (grad += weight_decay * param before the moments).
  TORCH_ARG(bool, adamw_mode) = true;
  TORCH_ARG(bool, bias_correction) = true;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// Per-parameter state (the Adam family's: step count and the two moments).
using HybridAdamParamState = AdamMomentsParamState;

// Adam/AdamW for parameters on any device, Colossal-AI's HybridAdam: a torch::optim::Optimizer,
// so it drops into LibTorch code (param groups, zero_grad, torch::save/load of its state).
// With adamw_mode and bias_correction it computes what torch::optim::AdamW computes (amsgrad
// off); with adamw_mode = false, what torch::optim::Adam computes with weight_decay. "The same"
// up to float rounding: within 1e-6 of LibTorch's after 10 fp32 steps on the CPU; the CUDA
// fused kernel orders its arithmetic differently (seen: 1.7e-6 after 10 steps at lr 1e-2).
//
// How each parameter is updated:
//   CPU, fp32, contiguous      adam_step_cpu: one vectorised, multi-threaded pass over the
//                              tensor (the ZeRO CPU-offload path)
//   CUDA, contiguous           LibTorch's fused Adam/AdamW kernel (LibTorch >= 2.1), one launch
//                              per device, dtype and step count; multi-tensor (_foreach_) ops
//                              where there is none (1.13) or bias_correction is off
//   anything else              multi-tensor ops
// Gradients of another dtype than their parameter are cast to it. Parameters without a
// gradient are skipped (their step count does not advance). The moments have the parameter's
// dtype: give it fp32 master weights (MasterWeights) for mixed precision.
class HybridAdam : public torch::optim::Optimizer {
 public:
  // Throws std::invalid_argument when a group's options are out of range (lr < 0, eps < 0,
  // betas outside [0, 1), weight_decay < 0).
  explicit HybridAdam(std::vector<torch::optim::OptimizerParamGroup> param_groups, HybridAdamOptions defaults = {});
  explicit HybridAdam(std::vector<torch::Tensor> params, HybridAdamOptions defaults = {})
      : HybridAdam({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace colo::optim
