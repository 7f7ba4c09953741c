#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colo/nn/layer.h"
#include "colo/nn/vit_config.h"

namespace colo::nn {

class LayerStack;

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
  int64_t numel() const;
};

struct ModelSummary {
  std::vector<LayerSummary> layers;
  int64_t num_parameters() const;
  int64_t num_trainable() const;
};

// The summary of a model in memory (trainable: requires_grad).
ModelSummary summarize(const LayerStack& model);

// The summary of make_vision_transformer(config), building one layer at a time and one encoder
// block only (every block has the same parameters and footprint under its own prefix): a
// 6.45B-parameter ViT is planned with about 0.8 GB of memory.
ModelSummary summarize_vision_transformer(const ViTConfig& config);

}  // namespace colo::nn
