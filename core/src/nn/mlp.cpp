#include <colo/nn/mlp.h>

#include <colo/nn/gelu.h>
#include <colo/nn/init.h>
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
  // Exact (erf) GELU, as timm's nn.GELU(); with a plain colo Linear as fc1 (not fp8, not a
  // tensor-parallel shard) in one step whose backward hands fc1 its bias gradient.
  const auto* plain = fc1_.ptr()->as<LinearImpl>();
  auto h = plain && !plain->fp8() && linear_gelu_fuses(x, plain->weight, plain->bias)
               ? linear_gelu(x, plain->weight, plain->bias)
               : colo::nn::gelu(fc1_.forward(x));
  {
    RegionRng::Scope hidden(sharded_rng_.get());
    h = torch::dropout(h, drop_, is_training());
  }
  h = fc2_.forward(h);
  RegionRng::Scope tokens(rng_for_outputs_ ? sharded_rng_.get() : nullptr);
  return torch::dropout(h, drop_, is_training());
}

}  // namespace colo::nn
