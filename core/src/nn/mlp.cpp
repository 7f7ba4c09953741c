#include <colo/nn/mlp.h>

#include <colo/nn/fp8_linear.h>
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
  torch::Tensor h;
  if (plain && !plain->fp8() && linear_gelu_fuses(x, plain->weight, plain->bias)) {
    h = linear_gelu(x, plain->weight, plain->bias);
  } else {
    auto* fc2 = fc2_.ptr()->as<LinearImpl>();
    const bool no_hidden_dropout = drop_ == 0.0 || !is_training();
    // Under fp8 with both layers plain colo Linears in float8: fc1, GELU and fc2 as one function,
    // fc1's float8 output gradient made inside the GELU's backward (fp8_mlp).
    if (fp8_gelu_fusion_ && fp8_gelu_backward_fusion_ && plain && plain->fp8() && fc2 && fc2->fp8() && x.scalar_type() == torch::kBFloat16 &&
        no_hidden_dropout && fp8_mlp_fuses_backward(plain->bias, fc2->bias, plain->fp8_scales(), fc2->fp8_scales())) {
      h = fp8_mlp(x, plain->weight, plain->bias, fc2->weight, fc2->bias, plain->fp8_scales(), fc2->fp8_scales());
      RegionRng::Scope tokens(rng_for_outputs_ ? sharded_rng_.get() : nullptr);
      return torch::dropout(h, drop_, is_training());
    }
    h = fc1_.forward(x);
    // Under fp8, fc2's float8 input straight from fc1's output (the GELU in the cast), where no
    // dropout sits between them.
    if (fp8_gelu_fusion_ && fc2 && fc2->fp8() && h.scalar_type() == torch::kBFloat16 && no_hidden_dropout) {
      h = fp8_gelu_linear(h, fc2->weight, fc2->bias, fc2->fp8_scales());
      RegionRng::Scope tokens(rng_for_outputs_ ? sharded_rng_.get() : nullptr);
      return torch::dropout(h, drop_, is_training());
    }
    h = colo::nn::gelu(h);
  }
  {
    RegionRng::Scope hidden(sharded_rng_.get());
    h = torch::dropout(h, drop_, is_training());
  }
  h = fc2_.forward(h);
  RegionRng::Scope tokens(rng_for_outputs_ ? sharded_rng_.get() : nullptr);
  return torch::dropout(h, drop_, is_training());
}

namespace {

// Calls `set` on every Mlp of `model`; how many there were.
int64_t for_every_mlp(torch::nn::Module& model, void (Mlp::*set)(bool), bool on) {
  int64_t count = 0;
  for (const auto& module : model.modules()) {
    if (auto* mlp = module->as<Mlp>()) {
      (mlp->*set)(on);
      ++count;
    }
  }
  return count;
}

}  // namespace

int64_t set_fp8_gelu_fusion(torch::nn::Module& model, bool on) {
  return for_every_mlp(model, &Mlp::set_fp8_gelu_fusion, on);
}

int64_t set_fp8_gelu_backward_fusion(torch::nn::Module& model, bool on) {
  return for_every_mlp(model, &Mlp::set_fp8_gelu_backward_fusion, on);
}

}  // namespace colo::nn
