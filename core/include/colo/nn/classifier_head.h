#pragma once

#include <torch/torch.h>

#include "colo/nn/layer.h"
#include "colo/nn/linear.h"
#include "colo/nn/vit_config.h"

namespace colo::nn {

// The ViT's last layer: tokens [B, T, D] → logits [B, num_classes]. Normalises every token,
// takes the class token (timm's global_pool='token', fc_norm = Identity) and applies the
// linear classifier. Canonical names: norm.weight, norm.bias, head.weight, head.bias.
class ClassifierHead : public Layer {
 public:
  explicit ClassifierHead(const ViTConfig& config);

  torch::Tensor forward(const torch::Tensor& x) override;

  const torch::nn::LayerNorm& norm() const { return norm_; }
  const Linear& head() const { return head_; }

 private:
  torch::nn::LayerNorm norm_{nullptr};
  Linear head_{nullptr};
};

}  // namespace colo::nn
