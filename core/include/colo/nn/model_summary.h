#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <colo/nn/layer.h>
#include <colo/nn/vit_config.h>

namespace colo::nn {

class LayerStack;
struct ResNetConfig;

// A model described without its values: what planning memory needs (Booster::plan_memory),
// for a model too large to build on the machine that plans it.
struct ParameterSummary {
  std::string name;  // canonical
  std::vector<int64_t> shape;
  int64_t numel = 0;
  bool trainable = true;
};

struct LayerSummary {
  std::string name;  // the canonical prefix without its dot ("blocks.3"), or "layer <k>"
  std::vector<ParameterSummary> parameters;
  ActivationFootprint activations;
  int64_t attention_heads = 0;  // Layer::attention_heads()
  int64_t numel() const;
};

struct ModelSummary {
  std::vector<LayerSummary> layers;
  int64_t num_parameters() const;
  int64_t num_trainable() const;
};

// The summary of a model in memory (trainable: requires_grad).
ModelSummary summarize(const LayerStack& model);

// The summaries of make_vision_transformer(config) and make_resnet(config), equal to
// summarize() of the built model (nn_test holds them to it), made from the configuration's
// shapes alone: nothing is built or allocated, so a model of any size is planned on any machine
// (a 6.45B-parameter ViT, or one whose every layer would exceed the host's memory).
ModelSummary summarize_vision_transformer(const ViTConfig& config);
ModelSummary summarize_resnet(const ResNetConfig& config);

}  // namespace colo::nn
