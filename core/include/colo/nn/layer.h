#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include <colo/nn/shard_spec.h>

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

  // Which of this layer's parameters tensor parallelism split, and how, by local name
  // ("attn.qkv.weight"): set by whoever shards the layer (a shardformer policy); a parameter
  // without one is whole (replicated over the tensor-parallel ranks).
  void set_shard_spec(const std::string& local_name, ShardSpec spec) { shard_specs_[local_name] = spec; }
  const std::map<std::string, ShardSpec>& shard_specs() const { return shard_specs_; }

 private:
  std::map<std::string, ShardSpec> shard_specs_;
};

}  // namespace colo::nn
