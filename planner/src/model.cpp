#include <colo/booster/closest_match.h>
#include <colo/planner/model.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <utility>

namespace colo::planner {
namespace {

struct Named {
  const char* name;
  std::vector<const char*> aliases;
  nn::ViTConfig (*make)();
};

const std::vector<Named>& known() {
  static const std::vector<Named> models = {
      {"tiny", {"vit-ti/16", "vit-tiny"}, [] { return nn::ViTConfig::preset("tiny"); }},
      {"small", {"vit-s/16", "vit-small"}, [] { return nn::ViTConfig::preset("small"); }},
      {"base", {"vit-b/16", "vit-base"}, [] { return nn::ViTConfig::preset("base"); }},
      {"large", {"vit-l/16", "vit-large"}, [] { return nn::ViTConfig::preset("large"); }},
      {"huge", {"vit-h/14", "vit-huge"},
       [] { return nn::ViTConfig().patch_size(14).embed_dim(1280).depth(32).num_heads(16); }},
      {"6.45b", {"giant", "vit-6.45b"},
       [] { return nn::ViTConfig().patch_size(16).embed_dim(4096).depth(32).num_heads(64); }},
  };
  return models;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& m : known()) names.emplace_back(m.name);
  return names;
}

ModelSpec model_by_name(const std::string& name) {
  const auto wanted = lower(name);
  std::vector<std::string> spellings;
  for (const auto& m : known()) {
    spellings.emplace_back(m.name);
    bool match = wanted == m.name;
    for (const auto* alias : m.aliases) {
      spellings.emplace_back(alias);
      match = match || wanted == alias;
    }
    if (match) return {m.name, m.make()};
  }
  const auto near = closest_match(wanted, spellings);
  throw std::invalid_argument(fmt::format("unknown model '{}'{}; the planner knows: {} (or describe one with "
                                          "--image-size, --patch-size, --hidden, --depth, --heads, --mlp-ratio)",
                                          name, near ? fmt::format(" (did you mean '{}'?)", *near) : "",
                                          fmt::join(model_names(), ", ")));
}

double patch_embedding_flops(const nn::ViTConfig& c, int64_t samples) {
  const double n = static_cast<double>(c.num_patches());
  const double p = static_cast<double>(c.patch_size());
  return 2.0 * static_cast<double>(samples) * n * static_cast<double>(c.in_channels()) * p * p *
         static_cast<double>(c.embed_dim());
}

double encoder_block_flops(const nn::ViTConfig& c, int64_t samples, int tp) {
  const double t = static_cast<double>(c.num_tokens());
  const double d = static_cast<double>(c.embed_dim());
  const double m = static_cast<double>(c.mlp_hidden_dim());
  return 2.0 * static_cast<double>(samples) * (4.0 * t * d * d + 2.0 * t * t * d + 2.0 * t * d * m) /
         static_cast<double>(std::max(tp, 1));
}

double head_flops(const nn::ViTConfig& c, int64_t samples) {
  return 2.0 * static_cast<double>(samples) * static_cast<double>(c.embed_dim()) * static_cast<double>(c.num_classes());
}

double forward_flops_per_image(const nn::ViTConfig& c) {
  return patch_embedding_flops(c, 1) + static_cast<double>(c.depth()) * encoder_block_flops(c, 1, 1) + head_flops(c, 1);
}

double training_flops_per_image(const nn::ViTConfig& c) { return 3.0 * forward_flops_per_image(c); }

}  // namespace colo::planner
