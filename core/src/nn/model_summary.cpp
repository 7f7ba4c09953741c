#include <colo/nn/model_summary.h>

#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <colo/nn/classifier_head.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/patch_embedding.h>

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
  s.attention_heads = layer.attention_heads();
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

namespace {

void add_vit_parameter(LayerSummary& layer, std::string name, std::vector<int64_t> shape) {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  layer.parameters.push_back({std::move(name), std::move(shape), numel, true});
}

// The layers' parameters in their registration order (timm's state_dict order): PatchEmbedding,
// EncoderBlock (with its Attention and Mlp) and ClassifierHead register these.
LayerSummary patch_embedding_summary(const ViTConfig& c) {
  LayerSummary s;
  s.name = "layer 0";
  const int64_t d = c.embed_dim();
  add_vit_parameter(s, "cls_token", {1, 1, d});
  add_vit_parameter(s, "pos_embed", {1, c.num_tokens(), d});
  add_vit_parameter(s, "patch_embed.proj.weight", {d, c.in_channels(), c.patch_size(), c.patch_size()});
  add_vit_parameter(s, "patch_embed.proj.bias", {d});
  s.activations = PatchEmbedding::footprint(c);
  return s;
}

LayerSummary encoder_block_summary(const ViTConfig& c, int64_t index) {
  LayerSummary s;
  s.name = fmt::format("blocks.{}", index);
  const std::string p = s.name + ".";
  const int64_t d = c.embed_dim(), h = c.mlp_hidden_dim();
  add_vit_parameter(s, p + "norm1.weight", {d});
  add_vit_parameter(s, p + "norm1.bias", {d});
  add_vit_parameter(s, p + "attn.qkv.weight", {3 * d, d});
  if (c.qkv_bias()) add_vit_parameter(s, p + "attn.qkv.bias", {3 * d});
  add_vit_parameter(s, p + "attn.proj.weight", {d, d});
  add_vit_parameter(s, p + "attn.proj.bias", {d});
  add_vit_parameter(s, p + "norm2.weight", {d});
  add_vit_parameter(s, p + "norm2.bias", {d});
  add_vit_parameter(s, p + "mlp.fc1.weight", {h, d});
  add_vit_parameter(s, p + "mlp.fc1.bias", {h});
  add_vit_parameter(s, p + "mlp.fc2.weight", {d, h});
  add_vit_parameter(s, p + "mlp.fc2.bias", {d});
  s.activations = EncoderBlock::footprint(c);
  s.attention_heads = c.num_heads();
  return s;
}

LayerSummary classifier_head_summary(const ViTConfig& c) {
  LayerSummary s;
  s.name = fmt::format("layer {}", c.depth() + 1);
  add_vit_parameter(s, "norm.weight", {c.embed_dim()});
  add_vit_parameter(s, "norm.bias", {c.embed_dim()});
  add_vit_parameter(s, "head.weight", {c.num_classes(), c.embed_dim()});
  add_vit_parameter(s, "head.bias", {c.num_classes()});
  s.activations = ClassifierHead::footprint(c);
  return s;
}

}  // namespace

ModelSummary summarize_vision_transformer(const ViTConfig& config) {
  config.validate();
  ModelSummary s;
  s.layers.push_back(patch_embedding_summary(config));
  for (int64_t i = 0; i < config.depth(); ++i) s.layers.push_back(encoder_block_summary(config, i));
  s.layers.push_back(classifier_head_summary(config));
  return s;
}

}  // namespace colo::nn
