#pragma once

#include <torch/torch.h>

#include <functional>

#include <colo/nn/layer.h>
#include <colo/nn/linear.h>
#include <colo/nn/vit_config.h>

namespace colo::nn {

// The ViT's last layer: tokens [B, T, D] → logits [B, num_classes]. Normalises every token,
// takes the class token (timm's global_pool='token', fc_norm = Identity) and applies the
// linear classifier. Canonical names: norm.weight, norm.bias, head.weight, head.bias.
class ClassifierHead : public Layer {
 public:
  explicit ClassifierHead(const ViTConfig& config);

  torch::Tensor forward(const torch::Tensor& x) override;
  ActivationFootprint activation_footprint() const override;
  // The same for `config`, without a layer (summaries made from the configuration alone).
  static ActivationFootprint footprint(const ViTConfig& config);

  const torch::nn::LayerNorm& norm() const { return norm_; }
  const Linear& head() const { return head_; }

  // Applied to the tokens as they enter the layer: where a policy puts the communication that
  // ends a region (sequence parallelism's gather of the tokens). None by default.
  void set_input_mapping(std::function<torch::Tensor(const torch::Tensor&)> mapping) {
    input_mapping_ = std::move(mapping);
  }

 private:
  std::function<torch::Tensor(const torch::Tensor&)> input_mapping_;
  torch::nn::LayerNorm norm_{nullptr};
  Linear head_{nullptr};
  ActivationFootprint footprint_;
};

}  // namespace colo::nn
