#pragma once

#include "colo/nn/region_rng.h"

#include <torch/torch.h>

#include "colo/nn/vit_config.h"

namespace colo::nn {

// Multi-head self-attention over tokens [B, T, D], timm's layout: one fused `qkv` linear
// (output rows [q; k; v], each heads × head_dim) and an output projection `proj`.
//
// qkv and proj are held through torch::nn::AnyModule and registered under those names so that
// a tensor-parallel policy can swap them (replace_qkv / replace_proj) for a column- and a
// row-parallel linear; any module with `Tensor forward(const Tensor&)` fits. The number of
// heads is read from qkv's output width (3 × heads × head_dim), so after sharding each rank
// attends over its own heads with no change here, provided the policy keeps [q; k; v] per
// rank.
class Attention : public torch::nn::Module, public UsesRegionRng {
 public:
  explicit Attention(const ViTConfig& config);

  torch::Tensor forward(const torch::Tensor& x);

  const torch::nn::AnyModule& qkv() const { return qkv_; }
  int64_t head_dim() const { return head_dim_; }
  const torch::nn::AnyModule& proj() const { return proj_; }
  void replace_qkv(torch::nn::AnyModule module);
  void replace_proj(torch::nn::AnyModule module);
  // The stream the attention-probability dropout draws from (this rank's heads, once sharded),
  // and, when `outputs_too`, the output dropout (this rank's tokens, under sequence parallelism).
  void set_sharded_rng(std::shared_ptr<RegionRng> rng, bool outputs_too);
  RegionRng* region_rng() const override { return sharded_rng_.get(); }

 private:
  int64_t head_dim_;
  double attn_drop_;
  double proj_drop_;
  torch::nn::AnyModule qkv_;
  torch::nn::AnyModule proj_;
  std::shared_ptr<RegionRng> sharded_rng_;
  bool rng_for_outputs_ = false;
};

}  // namespace colo::nn
