#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <colo/nn/layer.h>

namespace colo::nn {

// The model contract (docs/architecture.md, reading order): an ordered list of layers, registered as children "0",
// "1", ..., whose composition is the model. Pipeline parallelism keeps a slice of it per
// stage, ZeRO-3 wraps each layer, tensor parallelism rewrites sub-modules inside layers; all
// of them agree on parameter identity through canonical names (Layer::canonical_prefix()
// + the layer's local name), never through the module tree.
class LayerStack : public torch::nn::Module {
 public:
  LayerStack() = default;
  explicit LayerStack(std::vector<std::shared_ptr<Layer>> layers);

  void push_back(std::shared_ptr<Layer> layer);

  // Runs the layers in order (Layer::run: checkpointed where that is on).
  virtual torch::Tensor forward(const torch::Tensor& x);

  // Activation checkpointing for every layer that transforms hidden states with a gradient to
  // pass on (every layer but one whose input needs no gradient, which simply runs: the first).
  // For the ViT: each encoder block recomputes its activations in backward; with it on, a block
  // keeps only its input ([B, T, D]) between forward and backward. Works under every plugin
  // (they all run layers through Layer::run), exact in fp32.
  void set_activation_checkpointing(bool enabled);

  std::size_t size() const { return layers_.size(); }
  bool empty() const { return layers_.empty(); }
  // Throws std::out_of_range naming i and size() when i is out of range.
  const std::shared_ptr<Layer>& layer(std::size_t i) const;
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }

  // A stack of layers [begin, end) of this one. The layers are shared, not copied: a pipeline
  // stage builds the whole model (same seed everywhere), keeps its slice and drops the rest.
  // The slice's children are renumbered "0", "1", ..., but canonical names are unchanged.
  // Throws std::out_of_range unless begin <= end <= size().
  std::shared_ptr<LayerStack> slice(std::size_t begin, std::size_t end) const;

  // Parameters / buffers under their canonical names, in layer order (for the ViT: exactly
  // the keys and order of timm's state_dict()). Throws std::logic_error if two layers produce
  // the same canonical name.
  torch::OrderedDict<std::string, torch::Tensor> canonical_named_parameters() const;
  torch::OrderedDict<std::string, torch::Tensor> canonical_named_buffers() const;
  std::vector<std::string> canonical_parameter_names() const;
  // The 1D tensor-parallel splits of the parameters (Layer::shard_specs) under canonical names;
  // parameters not listed are whole or cut in 2D. What reads a parameter's split reads
  // canonical_shard_cuts, which has both.
  std::map<std::string, ShardSpec> canonical_shard_specs() const;
  // Every tensor-parallel split under canonical names, as a list of cuts: a 1D split
  // (Layer::shard_specs) as one cut, a 2D one (Layer::shard_cuts) as recorded; parameters not
  // listed are whole. Throws std::logic_error for a parameter recorded both ways.
  std::map<std::string, std::vector<ShardSpec>> canonical_shard_cuts() const;

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace colo::nn
