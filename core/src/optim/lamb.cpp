#include <colo/optim/lamb.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/serialize.h>

#include <cmath>
#include <stdexcept>

namespace colo::optim {
namespace {

void validate(const LambOptions& o, size_t group) {
  auto errors = adam_option_errors(o.lr(), o.eps(), o.betas(), o.weight_decay());
  if (!(o.max_weight_norm() > 0.0)) {
    errors.push_back(fmt::format("max_weight_norm {} must be > 0 (infinity disables the clamp)", o.max_weight_norm()));
  }
  if (!errors.empty()) {
    throw std::invalid_argument(fmt::format("Lamb: parameter group {}: {}", group, fmt::join(errors, "; ")));
  }
}

}  // namespace

LambOptions::LambOptions(double lr) : lr_(lr) {}

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(bias_correction);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_weight_norm);
}

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, bias_correction);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, max_weight_norm);
}

Lamb::Lamb(std::vector<torch::optim::OptimizerParamGroup> param_groups, LambOptions defaults)
    : Optimizer(std::move(param_groups), std::make_unique<LambOptions>(defaults)) {
  validate(defaults, 0);
  for (size_t i = 0; i < param_groups_.size(); ++i) {
    validate(static_cast<const LambOptions&>(param_groups_[i].options()), i);
  }
}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LambOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto grad = param.grad();
      if (grad.is_sparse()) throw std::invalid_argument("Lamb does not support sparse gradients; use dense embeddings");
      if (grad.scalar_type() != param.scalar_type()) grad = grad.to(param.scalar_type());
      auto& state = advance_adam_moments(*this, param);
      auto& exp_avg = state.exp_avg();
      auto& exp_avg_sq = state.exp_avg_sq();
      exp_avg.mul_(beta1).add_(grad, 1.0 - beta1);
      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);

      torch::Tensor update;
      if (o.bias_correction()) {
        const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(state.step()));
        const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(state.step()));
        update = (exp_avg / bc1).div_((exp_avg_sq / bc2).sqrt_().add_(o.eps()));
      } else {
        update = exp_avg / exp_avg_sq.sqrt().add_(o.eps());
      }
      if (o.weight_decay() != 0.0) update.add_(param, o.weight_decay());

      const auto weight_norm = param.norm().clamp_max(o.max_weight_norm());
      const auto update_norm = update.norm();
      const auto trust_ratio = torch::where(weight_norm.gt(0).logical_and(update_norm.gt(0)), weight_norm / update_norm,
                                            torch::ones_like(weight_norm));
      param.add_(update.mul_(trust_ratio), -o.lr());
    }
  }
  return loss;
}

void Lamb::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

void Lamb::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

}  // namespace colo::optim
