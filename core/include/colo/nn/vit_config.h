#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <vector>

namespace colo::nn {

// Hyper-parameters of a Vision Transformer, with timm's names and defaults (ViT-Base/16 at
// 224²). Setters chain: ViTConfig::preset("tiny").num_classes(10).drop_path_rate(0.1).
struct ViTConfig {
 public:
  // timm's vit_{tiny,small,base,large}_patch16_224; also accepts those full names. Throws
  // std::invalid_argument listing the valid names for anything else.
  static ViTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  // Throws std::invalid_argument listing every violated rule (embed_dim divisible by
  // num_heads, image_size divisible by patch_size, rates in [0, 1), ...).
  void validate() const;

  int64_t grid_size() const { return image_size_ / patch_size_; }
  int64_t num_patches() const { return grid_size() * grid_size(); }
  int64_t num_tokens() const { return num_patches() + 1; }  // patches + class token
  int64_t head_dim() const { return embed_dim_ / num_heads_; }
  int64_t mlp_hidden_dim() const { return static_cast<int64_t>(static_cast<double>(embed_dim_) * mlp_ratio_); }
  // Stochastic-depth rate of block i: rises linearly from 0 (first) to drop_path_rate (last).
  double drop_path_rate_of_block(int64_t i) const;

  TORCH_ARG(int64_t, image_size) = 224;
  TORCH_ARG(int64_t, patch_size) = 16;
  TORCH_ARG(int64_t, in_channels) = 3;
  TORCH_ARG(int64_t, num_classes) = 1000;
  TORCH_ARG(int64_t, embed_dim) = 768;
  TORCH_ARG(int64_t, depth) = 12;
  TORCH_ARG(int64_t, num_heads) = 12;
  TORCH_ARG(double, mlp_ratio) = 4.0;
  TORCH_ARG(bool, qkv_bias) = true;
  // Dropout after adding the position embedding, after the attention projection and after
  // each MLP linear (timm's pos_drop_rate and proj_drop_rate; timm ≥ 0.9 calls its head
  // dropout drop_rate, which colo does not have).
  TORCH_ARG(double, drop_rate) = 0.0;
  TORCH_ARG(double, attn_drop_rate) = 0.0;
  TORCH_ARG(double, drop_path_rate) = 0.0;
  // timm uses 1e-6; Hugging Face's ViTConfig defaults to 1e-12 (set it when loading HF weights).
  TORCH_ARG(double, norm_eps) = 1e-6;
};

}  // namespace colo::nn
