#include <colo/nn/vit_config.h>

#include <fmt/format.h>

#include <stdexcept>

namespace colo::nn {
namespace {

struct Preset {
  const char* name;
  int64_t embed_dim;
  int64_t depth;
  int64_t num_heads;
};

// timm's vit_*_patch16_224 (all: patch 16, image 224, MLP ratio 4, 1000 classes, qkv bias).
constexpr Preset kPresets[] = {
    {"tiny", 192, 12, 3},
    {"small", 384, 12, 6},
    {"base", 768, 12, 12},
    {"large", 1024, 24, 16},
};

std::string timm_name(const Preset& p) { return fmt::format("vit_{}_patch16_224", p.name); }

}  // namespace

std::vector<std::string> ViTConfig::preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

ViTConfig ViTConfig::preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name || name == timm_name(p)) {
      return ViTConfig().embed_dim(p.embed_dim).depth(p.depth).num_heads(p.num_heads);
    }
  }
  std::string valid;
  for (const auto& p : kPresets) valid += fmt::format("{}{} ({})", valid.empty() ? "" : ", ", p.name, timm_name(p));
  throw std::invalid_argument(fmt::format("unknown ViT preset '{}'; valid presets: {}", name, valid));
}

double ViTConfig::drop_path_rate_of_block(int64_t i) const {
  if (depth_ <= 1) return 0.0;
  return drop_path_rate_ * static_cast<double>(i) / static_cast<double>(depth_ - 1);
}

void ViTConfig::validate() const {
  std::vector<std::string> problems;
  auto positive = [&](const char* name, int64_t value) {
    if (value <= 0) problems.push_back(fmt::format("{} = {} must be positive", name, value));
  };
  positive("image_size", image_size_);
  positive("patch_size", patch_size_);
  positive("in_channels", in_channels_);
  positive("num_classes", num_classes_);
  positive("embed_dim", embed_dim_);
  positive("depth", depth_);
  positive("num_heads", num_heads_);
  if (image_size_ > 0 && patch_size_ > 0 && image_size_ % patch_size_ != 0) {
    problems.push_back(fmt::format("image_size = {} is not divisible by patch_size = {}", image_size_, patch_size_));
  }
  if (embed_dim_ > 0 && num_heads_ > 0 && embed_dim_ % num_heads_ != 0) {
    problems.push_back(fmt::format("embed_dim = {} is not divisible by num_heads = {}", embed_dim_, num_heads_));
  }
  if (!(mlp_ratio_ > 0.0) || (embed_dim_ > 0 && mlp_hidden_dim() <= 0)) {
    problems.push_back(fmt::format("mlp_ratio = {} must give a positive MLP width (embed_dim × mlp_ratio)", mlp_ratio_));
  }
  auto rate = [&](const char* name, double value) {
    if (!(value >= 0.0 && value < 1.0)) problems.push_back(fmt::format("{} = {} must be in [0, 1)", name, value));
  };
  rate("drop_rate", drop_rate_);
  rate("attn_drop_rate", attn_drop_rate_);
  rate("drop_path_rate", drop_path_rate_);
  if (!(norm_eps_ > 0.0)) problems.push_back(fmt::format("norm_eps = {} must be positive", norm_eps_));
  if (problems.empty()) return;
  std::string message = "invalid ViTConfig:";
  for (const auto& p : problems) message += "\n  - " + p;
  throw std::invalid_argument(message);
}

}  // namespace colo::nn
