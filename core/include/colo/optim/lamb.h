#pragma once

#include <colo/optim/adam_moments_param_state.h>
#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

namespace colo::optim {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3);  // NOLINT(google-explicit-constructor): torch's options idiom
  TORCH_ARG(double, lr) = 1e-3;
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0.0;
  // Off as in the LAMB paper's v3 and the reference implementations Colossal-AI's Lamb derives
  // from; on as in NVIDIA's / timm's LAMB.
  TORCH_ARG(bool, bias_correction) = false;
  // Upper clamp of ||w|| in the trust ratio (the reference pytorch-lamb's clamp(0, 10)); use
  // std::numeric_limits<double>::infinity() for the unclamped ratio.
  TORCH_ARG(double, max_weight_norm) = 10.0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// Per-parameter state (the Adam family's: step count and the two moments).
using LambParamState = AdamMomentsParamState;

// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"):
// Adam's direction, rescaled per parameter tensor (layer-wise) by a trust ratio. For each
// parameter w with gradient g, at step t (starting at 1):
//
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   m^ = m / (1 - beta1^t),  v^ = v / (1 - beta2^t)      (bias_correction; else m^ = m, v^ = v)
//   u = m^ / (sqrt(v^) + eps) + weight_decay * w
//   r = min(||w||, max_weight_norm) / ||u||   if ||w|| > 0 and ||u|| > 0,  else 1
//   w = w - lr * r * u
//
// (norms are L2 norms over the whole tensor). With the defaults this is Colossal-AI's Lamb plus
// the reference pytorch-lamb's weight-norm clamp. The trust ratio stays on the device: no host
// synchronisation per parameter.
class Lamb : public torch::optim::Optimizer {
 public:
  // Throws std::invalid_argument when a group's options are out of range.
  explicit Lamb(std::vector<torch::optim::OptimizerParamGroup> param_groups, LambOptions defaults = {});
  explicit Lamb(std::vector<torch::Tensor> params, LambOptions defaults = {})
      : Lamb({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace colo::optim
