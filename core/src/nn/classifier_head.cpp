#include <colo/nn/classifier_head.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include <colo/nn/init.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/layer_norm.h>

namespace colo::nn {

ClassifierHead::ClassifierHead(const ViTConfig& config) {
  config.validate();
  footprint_ = footprint(config);
  norm_ = register_module("norm",
                          torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.embed_dim()}).eps(config.norm_eps())));
  head_ = register_module("head", Linear(config.embed_dim(), config.num_classes()));
  init::timm_linear_init_(*head_);
}

torch::Tensor ClassifierHead::forward(const torch::Tensor& input) {
  const auto x = input_mapping_ ? input_mapping_(input) : input;
  if (x.dim() != 3) {
    throw std::invalid_argument(fmt::format("ClassifierHead: expected tokens [batch, tokens, dim], got [{}]",
                                            fmt::join(x.sizes(), ", ")));
  }
  // timm normalises every token, then pools the class token; LayerNorm acts on each token
  // alone, so normalising only the class token gives the same logits for less work.
  return head_->forward(layer_norm(x.select(1, 0), *norm_));
}

// Only the class token is normalised: the norm keeps its input and the classifier its input (D each).
ActivationFootprint ClassifierHead::footprint(const ViTConfig& config) {
  ActivationFootprint f;
  f.kept = 2 * config.embed_dim();
  f.output = config.num_classes();
  // Under precision=fp8 the classifier multiplies in float8 where its features fit (use_fp8_linears).
  if (fp8_linear_fits(config.embed_dim(), config.num_classes())) {
    f.kept_float8 = config.embed_dim();
    f.float8_weights = config.embed_dim() * config.num_classes();
  }
  return f;
}

ActivationFootprint ClassifierHead::activation_footprint() const { return footprint_; }

}  // namespace colo::nn
