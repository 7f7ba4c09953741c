#include <colo/nn/mlp.h>

#include <colo/nn/gelu.h>
#include <colo/nn/init.h>
#include <colo/nn/linear_gelu.h>
#include <colo/nn/linear.h>

namespace colo::nn {

Mlp::Mlp(const ViTConfig& config) : drop_(config.drop_rate()) {
  Linear fc1(config.embed_dim(), config.mlp_hidden_dim());
  Linear fc2(config.mlp_hidden_dim(), config.embed_dim());
  init::timm_linear_init_(*fc1);
  init::timm_linear_init_(*fc2);
  fc1_ = torch::nn::AnyModule(fc1);
  fc2_ = torch::nn::AnyModule(fc2);
  register_module("fc1", fc1_.ptr());
  register_module("fc2", fc2_.ptr());
}

void Mlp::replace_fc1(torch::nn::AnyModule module) {
  replace_module("fc1", module.ptr());
  fc1_ = std::move(module);
}

void Mlp::replace_fc2(torch::nn::AnyModule module) {
  replace_module("fc2", module.ptr());
  fc2_ = std::move(module);
}

void Mlp::set_sharded_rng(std::shared_ptr<RegionRng> rng, bool outputs_too) {
  sharded_rng_ = std::move(rng);
  rng_for_outputs_ = outputs_too;
}

torch::Tensor Mlp::forward(const torch::Tensor& x) {
  // Exact (erf) GELU, as timm's nn.GELU(). fc1 as colo's own Linear in bf16/fp16/fp32 products:
  // the product and GELU as one autograd function (the bias gradient in GELU's backward kernel);
  // any other fc1 (a tensor-parallel replacement, float8 products) through its own forward.
  torch::Tensor h;
  auto* fc1 = fc1_.ptr()->as<LinearImpl>();
  if (fc1 != nullptr && !fc1->fp8()) {
    h = linear_gelu(x, fc1->weight, fc1->bias);
  } else {
    h = colo::nn::gelu(fc1_.forward(x));
  }
  {
    RegionRng::Scope hidden(sharded_rng_.get());
    h = torch::dropout(h, drop_, is_training());
  }
  h = fc2_.forward(h);
  RegionRng::Scope tokens(rng_for_outputs_ ? sharded_rng_.get() : nullptr);
  return torch::dropout(h, drop_, is_training());
}

}  // namespace colo::nn
