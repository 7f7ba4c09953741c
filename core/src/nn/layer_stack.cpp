#include <colo/nn/layer_stack.h>

#include <fmt/format.h>

#include <stdexcept>

namespace colo::nn {
namespace {

using NamedTensorDict = torch::OrderedDict<std::string, torch::Tensor>;

template <typename Getter>
NamedTensorDict canonical_items(const std::vector<std::shared_ptr<Layer>>& layers, Getter get, const char* kind) {
  NamedTensorDict out(kind);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string prefix = layers[i]->canonical_prefix();
    for (const auto& item : get(*layers[i])) {
      std::string name = prefix + item.key();
      if (out.contains(name)) {
        throw std::logic_error(fmt::format("LayerStack: layer {} produces the canonical {} name '{}', which an earlier "
                                           "layer already has; give the layers distinct canonical_prefix()es",
                                           i, kind, name));
      }
      out.insert(std::move(name), item.value());
    }
  }
  return out;
}

}  // namespace

LayerStack::LayerStack(std::vector<std::shared_ptr<Layer>> layers) {
  for (auto& layer : layers) push_back(std::move(layer));
}

void LayerStack::push_back(std::shared_ptr<Layer> layer) {
  if (!layer) throw std::invalid_argument("LayerStack::push_back: the layer is null");
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
}

torch::Tensor LayerStack::forward(const torch::Tensor& x) {
  torch::Tensor h = x;
  for (const auto& layer : layers_) h = layer->run(h);
  return h;
}

void LayerStack::set_activation_checkpointing(bool enabled) {
  for (const auto& layer : layers_) layer->set_activation_checkpointing(enabled);
}

const std::shared_ptr<Layer>& LayerStack::layer(std::size_t i) const {
  if (i >= layers_.size()) {
    throw std::out_of_range(fmt::format("LayerStack::layer: index {} is out of range (size {})", i, size()));
  }
  return layers_[i];
}

std::shared_ptr<LayerStack> LayerStack::slice(std::size_t begin, std::size_t end) const {
  if (begin > end || end > layers_.size()) {
    throw std::out_of_range(
        fmt::format("LayerStack::slice: [{}, {}) is not a range of the stack's {} layers", begin, end, size()));
  }
  auto sub = std::make_shared<LayerStack>();
  for (std::size_t i = begin; i < end; ++i) sub->push_back(layers_[i]);
  return sub;
}

torch::OrderedDict<std::string, torch::Tensor> LayerStack::canonical_named_parameters() const {
  return canonical_items(layers_, [](const Layer& l) { return l.named_parameters(/*recurse=*/true); }, "parameter");
}

torch::OrderedDict<std::string, torch::Tensor> LayerStack::canonical_named_buffers() const {
  return canonical_items(layers_, [](const Layer& l) { return l.named_buffers(/*recurse=*/true); }, "buffer");
}

std::vector<std::string> LayerStack::canonical_parameter_names() const { return canonical_named_parameters().keys(); }

std::map<std::string, ShardSpec> LayerStack::canonical_shard_specs() const {
  std::map<std::string, ShardSpec> specs;
  for (const auto& layer : layers_) {
    for (const auto& [name, spec] : layer->shard_specs()) specs.emplace(layer->canonical_prefix() + name, spec);
  }
  return specs;
}

std::map<std::string, std::vector<ShardSpec>> LayerStack::canonical_shard_cuts() const {
  std::map<std::string, std::vector<ShardSpec>> cuts;
  for (const auto& layer : layers_) {
    for (const auto& [name, spec] : layer->shard_specs()) cuts.emplace(layer->canonical_prefix() + name, std::vector{spec});
    for (const auto& [name, list] : layer->shard_cuts()) {
      if (!cuts.emplace(layer->canonical_prefix() + name, list).second) {
        throw std::logic_error(fmt::format("'{}{}' is recorded as split both in 1D (shard_specs) and in 2D (shard_cuts)",
                                           layer->canonical_prefix(), name));
      }
    }
  }
  return cuts;
}

}  // namespace colo::nn
