#include "colo/nn/model_summary.h"

#include <fmt/format.h>

#include <memory>

#include "colo/nn/classifier_head.h"
#include "colo/nn/encoder_block.h"
#include "colo/nn/layer_stack.h"
#include "colo/nn/patch_embedding.h"

namespace colo::nn {
namespace {

LayerSummary summarize_layer(const Layer& layer, const std::string& fallback_name) {
  LayerSummary s;
  const auto prefix = layer.canonical_prefix();
  s.name = prefix.empty() ? fallback_name : prefix.substr(0, prefix.size() - (prefix.back() == '.' ? 1 : 0));
  for (const auto& item : layer.named_parameters(/*recurse=*/true)) {
    const auto& p = item.value();
    s.parameters.push_back({prefix + item.key(), p.sizes().vec(), p.numel(), p.requires_grad()});
  }
  s.activations = layer.activation_footprint();
  return s;
}

}  // namespace

int64_t LayerSummary::numel() const {
  int64_t n = 0;
  for (const auto& p : parameters) n += p.numel;
  return n;
}

int64_t ModelSummary::num_parameters() const {
  int64_t n = 0;
  for (const auto& layer : layers) n += layer.numel();
  return n;
}

int64_t ModelSummary::num_trainable() const {
  int64_t n = 0;
  for (const auto& layer : layers) {
    for (const auto& p : layer.parameters) n += p.trainable ? p.numel : 0;
  }
  return n;
}

ModelSummary summarize(const LayerStack& model) {
  ModelSummary s;
  for (std::size_t k = 0; k < model.size(); ++k) {
    s.layers.push_back(summarize_layer(*model.layer(k), fmt::format("layer {}", k)));
  }
  return s;
}

ModelSummary summarize_vision_transformer(const ViTConfig& config) {
  config.validate();
  ModelSummary s;
  s.layers.push_back(summarize_layer(*std::make_shared<PatchEmbedding>(config), "layer 0"));
  const auto block = summarize_layer(*std::make_shared<EncoderBlock>(config, 0), "layer 1");
  const std::string first = "blocks.0";
  for (int64_t i = 0; i < config.depth(); ++i) {
    auto copy = block;
    const std::string name = fmt::format("blocks.{}", i);
    copy.name = name;
    for (auto& p : copy.parameters) p.name = name + p.name.substr(first.size());
    s.layers.push_back(std::move(copy));
  }
  s.layers.push_back(summarize_layer(*std::make_shared<ClassifierHead>(config), fmt::format("layer {}", config.depth() + 1)));
  return s;
}

}  // namespace colo::nn
