#include <ATen/Parallel.h>
#include <colo/compat/torch_compat.h>
#include <colo/optim/adam_step_cpu.h>
#include <colo/optim/adam_step_multi_tensor.h>
#include <colo/optim/hybrid_adam.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/serialize.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

#include "adam_cpu_kernel.h"

namespace colo::optim {
namespace {

// ~128 KiB per tensor and chunk: the four streams of a chunk stay in L2 while a thread works.
constexpr int64_t kCpuChunk = 32768;

void validate(const HybridAdamOptions& o, size_t group) {
  const auto errors = adam_option_errors(o.lr(), o.eps(), o.betas(), o.weight_decay());
  if (!errors.empty()) {
    throw std::invalid_argument(fmt::format("HybridAdam: parameter group {}: {}", group, fmt::join(errors, "; ")));
  }
}

double bias_correction(const HybridAdamOptions& o, double beta, int64_t step) {
  return o.bias_correction() ? 1.0 - std::pow(beta, static_cast<double>(step)) : 1.0;
}

void require_cpu_fp32(const torch::Tensor& t, const char* name, int64_t numel) {
  if (!t.defined() || !t.device().is_cpu() || t.scalar_type() != torch::kFloat || !t.is_contiguous() ||
      t.numel() != numel) {
    throw std::invalid_argument(fmt::format(
        "adam_step_cpu: {} must be a contiguous fp32 CPU tensor of {} elements (the parameter's), got {}", name, numel,
        t.defined() ? fmt::format("{} {} tensor of {} elements{}", t.device().str(), c10::toString(t.scalar_type()),
                                  t.numel(), t.is_contiguous() ? "" : ", not contiguous")
                    : std::string("an undefined tensor")));
  }
}

// Tensors updated together: one device, dtype and step count, and all contiguous or not (the
// fused kernel takes contiguous tensors only; the others go through multi-tensor ops).
struct BucketKey {
  std::string device;
  c10::ScalarType dtype;
  int64_t step;
  bool contiguous;
  bool operator<(const BucketKey& other) const {
    return std::tie(device, dtype, step, contiguous) <
           std::tie(other.device, other.dtype, other.step, other.contiguous);
  }
};

struct Bucket {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
};

}  // namespace

void adam_step_multi_tensor(std::vector<torch::Tensor>& params, std::vector<torch::Tensor> grads,
                            std::vector<torch::Tensor>& exp_avgs, std::vector<torch::Tensor>& exp_avg_sqs, int64_t step,
                            const HybridAdamOptions& o) {
  const auto [beta1, beta2] = o.betas();
  const double bc1 = bias_correction(o, beta1, step);
  const double bc2 = bias_correction(o, beta2, step);
  if (o.adamw_mode()) {
    at::_foreach_mul_(params, 1.0 - o.lr() * o.weight_decay());
  } else if (o.weight_decay() != 0.0) {
    grads = at::_foreach_add(grads, params, o.weight_decay());
  }
  at::_foreach_mul_(exp_avgs, beta1);
  at::_foreach_add_(exp_avgs, grads, 1.0 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - beta2);
  auto denoms = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denoms, std::sqrt(bc2));
  at::_foreach_add_(denoms, o.eps());
  at::_foreach_addcdiv_(params, exp_avgs, denoms, -o.lr() / bc1);
}

// ---- options and state serialisation ---------------------------------------------------------

HybridAdamOptions::HybridAdamOptions(double lr) : lr_(lr) {}

void HybridAdamOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(adamw_mode);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(bias_correction);
}

void HybridAdamOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, adamw_mode);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, bias_correction);
}

// ---- the CPU kernel --------------------------------------------------------------------------

void adam_step_cpu(const torch::Tensor& param, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                   const torch::Tensor& exp_avg_sq, int64_t step, const HybridAdamOptions& options) {
  const int64_t n = param.defined() ? param.numel() : 0;
  require_cpu_fp32(param, "param", n);
  require_cpu_fp32(grad, "grad", n);
  require_cpu_fp32(exp_avg, "exp_avg", n);
  require_cpu_fp32(exp_avg_sq, "exp_avg_sq", n);
  if (step < 1) throw std::invalid_argument(fmt::format("adam_step_cpu: step {} must be >= 1", step));

  const auto [beta1, beta2] = options.betas();
  const double bc1 = bias_correction(options, beta1, step);
  const double bc2 = bias_correction(options, beta2, step);
  detail::AdamCoefficients c{};
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(options.eps());
  c.decay = static_cast<float>(1.0 - options.lr() * options.weight_decay());
  c.l2 = static_cast<float>(options.weight_decay());
  c.neg_step_size = static_cast<float>(-options.lr() / bc1);
  c.inv_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.decoupled = options.adamw_mode();

  float* p = param.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  at::parallel_for(0, n, kCpuChunk, [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; chunk += kCpuChunk) {
      const int64_t len = std::min(kCpuChunk, end - chunk);
      detail::adam_update(p + chunk, g + chunk, m + chunk, v + chunk, len, c);
    }
  });
}

// ---- the optimizer ---------------------------------------------------------------------------

HybridAdam::HybridAdam(std::vector<torch::optim::OptimizerParamGroup> param_groups, HybridAdamOptions defaults)
    : Optimizer(std::move(param_groups), std::make_unique<HybridAdamOptions>(defaults)) {
  validate(defaults, 0);
  for (size_t i = 0; i < param_groups_.size(); ++i) {
    validate(static_cast<const HybridAdamOptions&>(param_groups_[i].options()), i);
  }
}

torch::Tensor HybridAdam::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const HybridAdamOptions&>(group.options());
    std::map<BucketKey, Bucket> buckets;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto grad = param.grad();
      if (grad.is_sparse()) {
        throw std::invalid_argument("HybridAdam does not support sparse gradients; use dense embeddings");
      }
      if (grad.scalar_type() != param.scalar_type()) grad = grad.to(param.scalar_type());
      auto& state = advance_adam_moments(*this, param);

      const bool contiguous = param.is_contiguous() && grad.is_contiguous() && state.exp_avg().is_contiguous() &&
                              state.exp_avg_sq().is_contiguous();
      if (contiguous && param.device().is_cpu() && param.scalar_type() == torch::kFloat) {
        adam_step_cpu(param, grad, state.exp_avg(), state.exp_avg_sq(), state.step(), options);
        continue;
      }
      auto& bucket = buckets[BucketKey{param.device().str(), param.scalar_type(), state.step(), contiguous}];
      bucket.params.push_back(param);
      bucket.grads.push_back(grad);
      bucket.exp_avgs.push_back(state.exp_avg());
      bucket.exp_avg_sqs.push_back(state.exp_avg_sq());
    }
    for (auto& [key, b] : buckets) {
      const auto [beta1, beta2] = options.betas();
      const bool fused =
          options.bias_correction() && key.contiguous &&
          compat::fused_adam_step(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, key.step, options.lr(), beta1, beta2,
                                  options.weight_decay(), options.eps(), options.adamw_mode());
      if (!fused) adam_step_multi_tensor(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, key.step, options);
    }
  }
  return loss;
}

void HybridAdam::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<HybridAdamParamState, HybridAdamOptions>(archive, *this);
}

void HybridAdam::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<HybridAdamParamState, HybridAdamOptions>(archive, *this);
}

}  // namespace colo::optim
