#include <colo/compat/torch_compat.h>
#include <colo/optim/adam_moments_param_state.h>
#include <fmt/format.h>
#include <torch/optim/serialize.h>

#include <memory>

namespace colo::optim {

void AdamMomentsParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void AdamMomentsParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

AdamMomentsParamState& advance_adam_moments(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& states = optimizer.state();
  const auto key = compat::optimizer_state_key(param);
  auto it = states.find(key);
  if (it == states.end()) {
    auto fresh = std::make_unique<AdamMomentsParamState>();
    fresh->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    it = states.emplace(key, std::move(fresh)).first;
  }
  auto& state = static_cast<AdamMomentsParamState&>(*it->second);
  state.step(state.step() + 1);
  return state;
}

std::vector<std::string> adam_option_errors(double lr, double eps, const std::tuple<double, double>& betas,
                                            double weight_decay) {
  std::vector<std::string> errors;
  const auto [beta1, beta2] = betas;
  if (!(lr >= 0.0)) errors.push_back(fmt::format("lr {} must be >= 0", lr));
  if (!(eps >= 0.0)) errors.push_back(fmt::format("eps {} must be >= 0", eps));
  if (!(beta1 >= 0.0 && beta1 < 1.0)) errors.push_back(fmt::format("beta1 {} must lie in [0, 1)", beta1));
  if (!(beta2 >= 0.0 && beta2 < 1.0)) errors.push_back(fmt::format("beta2 {} must lie in [0, 1)", beta2));
  if (!(weight_decay >= 0.0)) errors.push_back(fmt::format("weight_decay {} must be >= 0", weight_decay));
  return errors;
}

}  // namespace colo::optim
