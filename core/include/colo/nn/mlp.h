#pragma once

#include <colo/nn/region_rng.h>

#include <torch/torch.h>

#include <colo/nn/vit_config.h>

namespace colo::nn {

// The transformer MLP: fc1 → GELU (exact, erf) → dropout → fc2 → dropout.
//
// fc1 and fc2 are held through torch::nn::AnyModule and registered under those names so that a
// tensor-parallel policy can swap them (replace_fc1 / replace_fc2) for a column- and a
// row-parallel linear; any module with `Tensor forward(const Tensor&)` fits.
class Mlp : public torch::nn::Module, public UsesRegionRng {
 public:
  explicit Mlp(const ViTConfig& config);

  torch::Tensor forward(const torch::Tensor& x);

  const torch::nn::AnyModule& fc1() const { return fc1_; }
  const torch::nn::AnyModule& fc2() const { return fc2_; }
  void replace_fc1(torch::nn::AnyModule module);
  void replace_fc2(torch::nn::AnyModule module);
  // The stream the hidden dropout draws from (this rank's hidden units, once sharded), and, when
  // `outputs_too`, the output dropout (this rank's tokens, under sequence parallelism).
  void set_sharded_rng(std::shared_ptr<RegionRng> rng, bool outputs_too);
  RegionRng* region_rng() const override { return sharded_rng_.get(); }
  // Under precision=fp8, whether the GELU runs inside the float8 cast of fc2's input
  // (colo::nn::fp8_gelu_linear) where it can: fc2 a colo::nn::Linear in float8, no hidden dropout
  // in effect. On by default; off gives the unfused pair (an A/B, or a check of the fusion).
  void set_fp8_gelu_fusion(bool on) { fp8_gelu_fusion_ = on; }
  bool fp8_gelu_fusion() const { return fp8_gelu_fusion_; }
  // With the GELU fusion on and fc1 a colo::nn::Linear in float8 too, whether fc1, GELU and fc2 run
  // as colo::nn::fp8_mlp, whose backward makes fc1's float8 output gradient (and its bias
  // gradient) inside the GELU's backward. On by default; off for an A/B.
  void set_fp8_gelu_backward_fusion(bool on) { fp8_gelu_backward_fusion_ = on; }
  bool fp8_gelu_backward_fusion() const { return fp8_gelu_backward_fusion_; }

 private:
  double drop_;
  torch::nn::AnyModule fc1_;
  torch::nn::AnyModule fc2_;
  std::shared_ptr<RegionRng> sharded_rng_;
  bool rng_for_outputs_ = false;
  bool fp8_gelu_fusion_ = true;
  bool fp8_gelu_backward_fusion_ = true;
};

// Mlp::set_fp8_gelu_fusion(on) on every Mlp of `model`; returns how many there are.
int64_t set_fp8_gelu_fusion(torch::nn::Module& model, bool on);

// Mlp::set_fp8_gelu_backward_fusion(on) on every Mlp of `model`; returns how many there are.
int64_t set_fp8_gelu_backward_fusion(torch::nn::Module& model, bool on);

}  // namespace colo::nn
