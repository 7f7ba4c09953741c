#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace colo::optim {

// The per-parameter state of colo's Adam-family optimizers (HybridAdam, Lamb): how many updates
// the parameter has had, and the two moments, with the parameter's shape, dtype and device.
struct AdamMomentsParamState : public torch::optim::OptimizerCloneableParamState<AdamMomentsParamState> {
  TORCH_ARG(int64_t, step) = 0;  // updates applied so far
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

// For a step of `optimizer` on `param`: its moments state, created with zero moments the first
// time, with the step count already advanced to this step's.
AdamMomentsParamState& advance_adam_moments(torch::optim::Optimizer& optimizer, const torch::Tensor& param);

// What is wrong with the options every Adam-family optimizer shares (lr >= 0, eps >= 0, betas in
// [0, 1), weight_decay >= 0): one message per violated rule, empty when none is.
std::vector<std::string> adam_option_errors(double lr, double eps, const std::tuple<double, double>& betas,
                                            double weight_decay);

}  // namespace colo::optim
