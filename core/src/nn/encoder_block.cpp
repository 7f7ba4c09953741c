#include <colo/nn/encoder_block.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include <colo/nn/drop_path.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/layer_norm.h>

namespace colo::nn {

EncoderBlock::EncoderBlock(const ViTConfig& config, int64_t index)
    : index_(index),
      drop_path_(config.drop_path_rate_of_block(index)),
      heads_(config.num_heads()) {
  config.validate();
  footprint_ = footprint(config);
  if (index < 0 || index >= config.depth()) {
    throw std::invalid_argument(
        fmt::format("EncoderBlock: index {} is outside [0, depth = {})", index, config.depth()));
  }
  const auto norm_options = torch::nn::LayerNormOptions({config.embed_dim()}).eps(config.norm_eps());
  // Registration order is timm's state_dict order.
  norm1_ = register_module("norm1", torch::nn::LayerNorm(norm_options));
  attn_ = register_module("attn", std::make_shared<Attention>(config));
  norm2_ = register_module("norm2", torch::nn::LayerNorm(norm_options));
  mlp_ = register_module("mlp", std::make_shared<Mlp>(config));
}

// Kept for backward, per sample (T tokens, width D, hidden width H = mlp_ratio·D): the block's
// input and norm1's output (2TD), q, k and v and the attention output (4TD, fused attention keeps
// only a T-long log-sum-exp per head beside them), proj's input (TD), norm2's input and output
// (2TD), fc1's output and GELU's output (2TH). Tensor parallelism splits the heads and the
// hidden units: q, k, v, the attention output, proj's input and the 2TH. (Dropout masks and
// unfused attention's T×T probabilities are not counted: see docs/memory_planning.md.)
ActivationFootprint EncoderBlock::footprint(const ViTConfig& config) {
  const int64_t tokens = config.num_tokens();
  const int64_t td = tokens * config.embed_dim();
  ActivationFootprint f;
  f.kept_tensor_parallel = 5 * td + 2 * tokens * config.mlp_hidden_dim();
  f.kept = 4 * td + f.kept_tensor_parallel;
  f.output = td;
  // Float8 linears (precision=fp8) keep their inputs as float8 copies: norm1's and norm2's outputs
  // (qkv's and fc1's inputs, whole under tensor parallelism), proj's input and GELU's output (fc2's,
  // split); and each weight's float8 copy. GELU's input (fc1's output) stays in bf16 for GELU's
  // backward, and the attention keeps its own bf16 output.
  const int64_t d = config.embed_dim(), hidden = config.mlp_hidden_dim();
  if (fp8_linear_fits(d, 3 * d) && fp8_linear_fits(d, hidden)) {
    f.kept_float8_tensor_parallel = td + tokens * hidden;
    f.kept_float8 = 2 * td + f.kept_float8_tensor_parallel;
    f.float8_weights = 4 * d * d + 2 * d * hidden;
  }
  return f;
}

ActivationFootprint EncoderBlock::activation_footprint() const { return footprint_; }

std::string EncoderBlock::canonical_prefix() const { return fmt::format("blocks.{}.", index_); }

torch::Tensor EncoderBlock::forward(const torch::Tensor& x) {
  if (!norm1_replacement_.is_empty() || !norm2_replacement_.is_empty()) {
    const auto norm1 = [&](const torch::Tensor& t) {
      return norm1_replacement_.is_empty() ? layer_norm(t, *norm1_) : norm1_replacement_.forward(t);
    };
    const auto norm2 = [&](const torch::Tensor& t) {
      return norm2_replacement_.is_empty() ? layer_norm(t, *norm2_) : norm2_replacement_.forward(t);
    };
    auto h = x + drop_path(attn_->forward(norm1(x)), drop_path_, is_training());
    return h + drop_path(mlp_->forward(norm2(h)), drop_path_, is_training());
  }
  // The first residual add and norm2 in one pass (colo::nn::add_layer_norm); the second add
  // stays: the next block's norm1 is in another layer (a pipeline stage may end here).
  auto [h, normed] = add_layer_norm(x, drop_path(attn_->forward(layer_norm(x, *norm1_)), drop_path_, is_training()),
                                    *norm2_);
  return h + drop_path(mlp_->forward(normed), drop_path_, is_training());
}

std::vector<std::string> EncoderBlock::replaceable_submodules() const {
  return {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2", "norm1", "norm2"};
}

void EncoderBlock::replace_submodule(const std::string& path, torch::nn::AnyModule module) {
  if (module.is_empty()) throw std::invalid_argument("EncoderBlock::replace_submodule: the module for '" + path + "' is empty");
  if (path == "attn.qkv") {
    attn_->replace_qkv(std::move(module));
  } else if (path == "attn.proj") {
    attn_->replace_proj(std::move(module));
  } else if (path == "mlp.fc1") {
    mlp_->replace_fc1(std::move(module));
  } else if (path == "mlp.fc2") {
    mlp_->replace_fc2(std::move(module));
  } else if (path == "norm1") {
    replace_module("norm1", module.ptr());
    norm1_replacement_ = std::move(module);
  } else if (path == "norm2") {
    replace_module("norm2", module.ptr());
    norm2_replacement_ = std::move(module);
  } else {
    throw std::invalid_argument(fmt::format("EncoderBlock::replace_submodule: '{}' cannot be replaced; valid paths: {}",
                                            path, fmt::join(replaceable_submodules(), ", ")));
  }
}

}  // namespace colo::nn
