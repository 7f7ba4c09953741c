#pragma once

#include <torch/torch.h>

#include <functional>

#include <colo/nn/layer.h>
#include <colo/nn/vit_config.h>

namespace colo::nn {

// The ViT's first layer: images [B, C, H, W] → tokens [B, 1 + N, D]. Cuts the image into
// N = (H/p)·(W/p) patches with a stride-p convolution, prepends the class token and adds the
// learned position embedding, then applies dropout. Canonical names (timm): cls_token
// [1, 1, D], pos_embed [1, 1 + N, D], patch_embed.proj.weight [D, C, p, p],
// patch_embed.proj.bias [D].
class PatchEmbedding : public Layer {
 public:
  // Initialised like timm: pos_embed ~ trunc_normal(std .02), cls_token ~ N(0, 1e-6²), the
  // convolution with PyTorch's default.
  explicit PatchEmbedding(const ViTConfig& config);

  // Throws std::invalid_argument unless x is [B, in_channels, image_size, image_size].
  torch::Tensor forward(const torch::Tensor& x) override;
  ActivationFootprint activation_footprint() const override;
  // The same for `config`, without a layer (summaries made from the configuration alone).
  static ActivationFootprint footprint(const ViTConfig& config);

  const torch::nn::Conv2d& proj() const { return proj_; }
  // The number of tokens it produces, 1 + N.
  int64_t num_tokens() const { return pos_embed_.size(1); }

  // Applied to the tokens before they leave the layer: where a policy puts the communication
  // that starts a region (sequence parallelism's split over the tokens). None by default.
  void set_output_mapping(std::function<torch::Tensor(const torch::Tensor&)> mapping) {
    output_mapping_ = std::move(mapping);
  }

 private:
  std::function<torch::Tensor(const torch::Tensor&)> output_mapping_;
  ViTConfig config_;
  torch::Tensor cls_token_;
  torch::Tensor pos_embed_;
  torch::nn::Conv2d proj_{nullptr};
};

}  // namespace colo::nn
