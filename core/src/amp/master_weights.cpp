#include <colo/amp/master_weights.h>
#include <colo/compat/torch_compat.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::amp {

MasterWeights::MasterWeights(std::vector<torch::Tensor> params, torch::Dtype working_dtype)
    : working_dtype_(working_dtype), working_(std::move(params)) {
  if (!c10::isFloatingType(working_dtype)) {
    throw std::invalid_argument(fmt::format(
        "MasterWeights: working dtype {} is not floating point; use fp32, fp16 or bf16", c10::toString(working_dtype)));
  }
  torch::NoGradGuard no_grad;
  masters_.reserve(working_.size());
  for (size_t i = 0; i < working_.size(); ++i) {
    auto& param = working_[i];
    if (!param.is_floating_point()) {
      throw std::invalid_argument(
          fmt::format("MasterWeights: parameter {} has dtype {}; only floating parameters can have fp32 masters", i,
                      c10::toString(param.scalar_type())));
    }
    if (working_dtype == torch::kFloat && param.scalar_type() == torch::kFloat) {
      masters_.push_back(param);
      continue;
    }
    auto master = param.detach().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
    master.set_requires_grad(param.requires_grad());
    masters_.push_back(master);
    param.set_data(param.detach().to(working_dtype));
  }
}

void MasterWeights::copy_grads_to_master() {
  torch::NoGradGuard no_grad;
  // Gradients whose master gradient exists already are copied in one multi-tensor launch.
  std::vector<torch::Tensor> dst, src;
  for (size_t i = 0; i < working_.size(); ++i) {
    if (masters_[i].is_same(working_[i])) continue;
    const auto& grad = working_[i].grad();
    auto& master_grad = masters_[i].mutable_grad();
    if (!grad.defined()) {
      master_grad = torch::Tensor();
    } else if (master_grad.defined()) {
      dst.push_back(master_grad);
      src.push_back(grad);
    } else {
      master_grad = grad.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
    }
  }
  compat::foreach_copy(dst, src);
}

void MasterWeights::copy_master_to_working() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> dst, src;
  for (size_t i = 0; i < working_.size(); ++i) {
    if (masters_[i].is_same(working_[i])) continue;
    dst.push_back(working_[i]);
    src.push_back(masters_[i]);
  }
  compat::foreach_copy(dst, src);
}

}  // namespace colo::amp
