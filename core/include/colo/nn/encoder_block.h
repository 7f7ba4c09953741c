#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include <colo/nn/attention.h>
#include <colo/nn/layer.h>
#include <colo/nn/mlp.h>
#include <colo/nn/vit_config.h>

namespace colo::nn {

// A pre-norm transformer block, tokens → tokens (timm's Block):
//   x = x + drop_path(attn(norm1(x)));  x = x + drop_path(mlp(norm2(x)))
// Canonical names: "blocks.{index}." + norm1.*, attn.qkv.*, attn.proj.*, norm2.*, mlp.fc1.*,
// mlp.fc2.*. Its stochastic-depth rate is config.drop_path_rate_of_block(index).
class EncoderBlock : public Layer {
 public:
  EncoderBlock(const ViTConfig& config, int64_t index);

  torch::Tensor forward(const torch::Tensor& x) override;
  ActivationFootprint activation_footprint() const override;
  int64_t attention_heads() const override { return heads_; }
  std::string canonical_prefix() const override;
  // The footprint of any block of `config` (every block has the same): what the instance reports,
  // and what a summary made from the configuration alone counts.
  static ActivationFootprint footprint(const ViTConfig& config);

  int64_t index() const { return index_; }
  double drop_path_rate() const { return drop_path_; }
  const std::shared_ptr<Attention>& attn() const { return attn_; }
  const std::shared_ptr<Mlp>& mlp() const { return mlp_; }

  // The sub-modules a tensor-parallel policy may swap (nn::Layer's interface): "attn.qkv",
  // "attn.proj", "mlp.fc1", "mlp.fc2", and "norm1", "norm2" (2D tensor parallelism normalises a
  // block of the features: LayerNorm2D). Once a norm is replaced, forward runs the residual add
  // and norm2 apart (add_layer_norm's fused pass needs a torch LayerNorm's parameters).
  std::vector<std::string> replaceable_submodules() const override;
  void replace_submodule(const std::string& path, torch::nn::AnyModule module) override;

 private:
  int64_t index_;
  double drop_path_;
  int64_t heads_;
  ActivationFootprint footprint_;
  torch::nn::LayerNorm norm1_{nullptr};
  std::shared_ptr<Attention> attn_;
  torch::nn::LayerNorm norm2_{nullptr};
  std::shared_ptr<Mlp> mlp_;
  // A replacement for norm1 / norm2 (empty while the block keeps its own LayerNorm).
  torch::nn::AnyModule norm1_replacement_;
  torch::nn::AnyModule norm2_replacement_;
};

}  // namespace colo::nn
