#pragma once

#include <torch/torch.h>

#include <string>

namespace colo::nn {

// One element of a LayerStack: a module that maps one tensor to one tensor (images → tokens,
// tokens → tokens, tokens → logits). LibTorch modules have no virtual forward; this interface
// gives the distributed strategies one, so that they can run, slice, wrap and re-shard layers
// without knowing their types.
class Layer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;

  // Prepended to this layer's local parameter and buffer names to give the model's canonical
  // names (timm's, for the ViT): an encoder block's "norm1.weight" becomes
  // "blocks.3.norm1.weight". Checkpoints and pretrained weights are keyed by canonical names,
  // so they survive pipeline slicing and wrapping, which change the module tree.
  virtual std::string canonical_prefix() const { return ""; }
};

}  // namespace colo::nn
