#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include <colo/nn/shard_spec.h>

namespace colo::nn {

// What a layer's forward pass leaves for its backward pass, per sample, in elements of the
// compute dtype: for planning memory (Booster::plan_memory), never for allocating it.
struct ActivationFootprint {
  int64_t kept = -1;                 // activations backward needs; -1: the layer does not say
  int64_t kept_tensor_parallel = 0;  // the part of `kept` tensor parallelism splits over its ranks
  int64_t output = -1;               // the layer's output (the next layer's input)
  // Under precision=fp8: the part of `kept` that the layer's float8 linears keep as one-byte
  // float8 copies instead (their inputs), and of that the part tensor parallelism splits; and
  // the weight elements they keep as float8 copies per pass, whatever its samples (split by tensor
  // parallelism in a layer it splits: one with kept_tensor_parallel).
  int64_t kept_float8 = 0;
  int64_t kept_float8_tensor_parallel = 0;
  int64_t float8_weights = 0;
};

// One element of a LayerStack: a module that maps one tensor to one tensor (images → tokens,
// tokens → tokens, tokens → logits). LibTorch modules have no virtual forward; this interface
// gives the distributed strategies one, so that they can run, slice, wrap and re-shard layers
// without knowing their types.
class Layer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;

  // forward(x), or its activation-checkpointed form when that is on for this layer (see
  // activation_checkpoint.h): what every driver of a LayerStack (its own forward, the plugins'
  // model wrappers, the pipeline) calls.
  torch::Tensor run(const torch::Tensor& x);

  // Activation checkpointing (off by default): the layer keeps only its input during forward
  // and recomputes the rest in backward, trading one more forward pass of the layer for its
  // activations' memory. LayerStack::set_activation_checkpointing sets it for a whole model.
  void set_activation_checkpointing(bool enabled) { activation_checkpointing_ = enabled; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

  // See ActivationFootprint; the default says nothing (the plan reports the layer as unknown).
  virtual ActivationFootprint activation_footprint() const { return {}; }
  // The attention heads this layer splits its width into (0: none): tensor parallelism must give
  // each rank whole heads, which a summary of parameter shapes alone cannot tell.
  virtual int64_t attention_heads() const { return 0; }

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

  // The same record for parameters cut along more than one dimension (2D tensor parallelism's
  // blocks: a list of one-dimensional cuts, nn::shard_of / nn::unshard over a list), by local
  // name. Kept apart from shard_specs (a 2D parameter has no entry there); the readers of a
  // parameter's split (optimizers, the gradient norm, checkpoints) take both through
  // LayerStack::canonical_shard_cuts.
  void set_shard_cuts(const std::string& local_name, std::vector<ShardSpec> cuts) {
    shard_cuts_[local_name] = std::move(cuts);
  }
  const std::map<std::string, std::vector<ShardSpec>>& shard_cuts() const { return shard_cuts_; }

  // The one way a policy swaps a sub-module: the paths this layer lets be replaced ("attn.qkv"),
  // and the swap, after which `module` runs in the sub-module's place and its parameters take
  // the sub-module's names ("attn.qkv.weight"). LibTorch modules have no virtual forward, so a
  // layer holds such sub-modules through AnyModule and overrides both; the default lets none.
  // replace_submodule throws std::invalid_argument naming the valid paths for any other path.
  virtual std::vector<std::string> replaceable_submodules() const { return {}; }
  virtual void replace_submodule(const std::string& path, torch::nn::AnyModule module);

 private:
  std::map<std::string, ShardSpec> shard_specs_;
  std::map<std::string, std::vector<ShardSpec>> shard_cuts_;
  bool activation_checkpointing_ = false;
};

}  // namespace colo::nn
