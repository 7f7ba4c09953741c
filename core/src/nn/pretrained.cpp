#include <colo/nn/pretrained.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <colo/checkpoint/finite_check.h>
#include <colo/checkpoint/safetensors.h>

namespace colo::nn {
namespace {

std::string shape_text(const torch::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// HF names inside "encoder.layer.{i}." → timm names inside "blocks.{i}.".
const std::array<std::pair<const char*, const char*>, 5> kHfBlockRenames{{
    {"layernorm_before.", "norm1."},
    {"layernorm_after.", "norm2."},
    {"attention.output.dense.", "attn.proj."},
    {"intermediate.dense.", "mlp.fc1."},
    {"output.dense.", "mlp.fc2."},
}};

const std::unordered_map<std::string, std::string>& hf_top_level_renames() {
  static const std::unordered_map<std::string, std::string> renames{
      {"embeddings.cls_token", "cls_token"},
      {"embeddings.position_embeddings", "pos_embed"},
      {"embeddings.patch_embeddings.projection.weight", "patch_embed.proj.weight"},
      {"embeddings.patch_embeddings.projection.bias", "patch_embed.proj.bias"},
      {"layernorm.weight", "norm.weight"},
      {"layernorm.bias", "norm.bias"},
      {"classifier.weight", "head.weight"},
      {"classifier.bias", "head.bias"},
  };
  return renames;
}

// load_timm_state without the finiteness check, which each public entry point makes once, on the
// names its caller knows (a Hugging Face file's own names, not the converted ones).
void copy_timm_state(LayerStack& model, const NamedTensors& full_state) {
  // A model sharded by tensor parallelism takes its piece of each split tensor (a tensor that
  // does not split the way the spec says stays whole, and is reported as mis-shaped below).
  const auto specs = model.canonical_shard_specs();
  NamedTensors state = full_state;
  for (auto& [name, tensor] : state) {
    const auto spec = specs.find(name);
    if (spec == specs.end() || !tensor.defined()) continue;
    try {
      tensor = shard_of(tensor, spec->second);
    } catch (const std::invalid_argument&) {
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& item : model.canonical_named_parameters()) targets.emplace_back(item.key(), item.value());
  for (const auto& item : model.canonical_named_buffers()) targets.emplace_back(item.key(), item.value());
  std::unordered_map<std::string, torch::Tensor> by_name(targets.begin(), targets.end());

  std::vector<std::string> unexpected, mismatched, duplicated, missing;
  std::set<std::string> provided;
  for (const auto& [name, tensor] : state) {
    if (!provided.insert(name).second) {
      duplicated.push_back(name);
      continue;
    }
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      unexpected.push_back(name);
    } else if (!tensor.defined() || tensor.sizes() != it->second.sizes()) {
      mismatched.push_back(fmt::format("{}: checkpoint {} vs model {}", name,
                                       tensor.defined() ? shape_text(tensor) : "undefined", shape_text(it->second)));
    }
  }
  for (const auto& [name, tensor] : targets) {
    if (provided.count(name) == 0) missing.push_back(name);
  }

  if (!missing.empty() || !unexpected.empty() || !mismatched.empty() || !duplicated.empty()) {
    std::string message = fmt::format("the checkpoint does not match the model ({} parameters and buffers):",
                                      targets.size());
    auto section = [&message](const char* title, const std::vector<std::string>& items) {
      if (items.empty()) return;
      message += fmt::format("\n  {} ({}):", title, items.size());
      for (const auto& item : items) message += "\n    " + item;
    };
    section("missing from the checkpoint", missing);
    section("in the checkpoint but not in the model", unexpected);
    section("shape mismatch", mismatched);
    section("listed more than once in the checkpoint", duplicated);
    throw std::invalid_argument(message);
  }

  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : state) by_name.at(name).copy_(tensor);
}

}  // namespace

void load_timm_state(LayerStack& model, const NamedTensors& state) {
  checkpoint::require_finite(state, "the timm state given to load_timm_state");
  copy_timm_state(model, state);
}

bool is_hf_vit_state(const NamedTensors& state) {
  for (const auto& [name, tensor] : state) {
    if (starts_with(name, "vit.") || starts_with(name, "embeddings.") || starts_with(name, "encoder.layer.")) {
      return true;
    }
  }
  return false;
}

NamedTensors hf_vit_to_timm_names(const NamedTensors& hf_state) {
  // q, k, v of one block and one kind ("weight"/"bias"), gathered until all three are seen.
  struct QkvParts {
    std::array<torch::Tensor, 3> parts;
    std::size_t output_index;  // where the fused tensor goes in the output
  };
  std::map<std::string, QkvParts> qkv_groups;  // keyed by the timm name of the fused tensor
  NamedTensors out;
  const std::array<const char*, 3> qkv_names{"query.", "key.", "value."};

  for (const auto& [hf_name, tensor] : hf_state) {
    std::string name = starts_with(hf_name, "vit.") ? hf_name.substr(4) : hf_name;
    if (const auto it = hf_top_level_renames().find(name); it != hf_top_level_renames().end()) {
      out.emplace_back(it->second, tensor);
      continue;
    }
    const std::string layer_prefix = "encoder.layer.";
    std::size_t dot = std::string::npos;
    if (starts_with(name, layer_prefix)) dot = name.find('.', layer_prefix.size());
    if (dot == std::string::npos) {
      out.emplace_back(hf_name, tensor);
      continue;
    }
    const std::string index = name.substr(layer_prefix.size(), dot - layer_prefix.size());
    const std::string rest = name.substr(dot + 1);
    const std::string block = "blocks." + index + ".";
    bool renamed = false;
    for (const auto& [from, to] : kHfBlockRenames) {
      if (starts_with(rest, from)) {
        out.emplace_back(block + to + rest.substr(std::strlen(from)), tensor);
        renamed = true;
        break;
      }
    }
    const std::string attention_prefix = "attention.attention.";
    if (!renamed && starts_with(rest, attention_prefix)) {
      const std::string qkv_rest = rest.substr(attention_prefix.size());
      for (std::size_t part = 0; part < qkv_names.size() && !renamed; ++part) {
        if (!starts_with(qkv_rest, qkv_names[part])) continue;
        const std::string fused_name = block + "attn.qkv." + qkv_rest.substr(std::strlen(qkv_names[part]));
        auto [group, inserted] = qkv_groups.try_emplace(fused_name);
        if (inserted) {
          group->second.output_index = out.size();
          out.emplace_back(fused_name, torch::Tensor());
        }
        group->second.parts[part] = tensor;
        renamed = true;
      }
    }
    if (!renamed) out.emplace_back(hf_name, tensor);
  }

  for (auto& [fused_name, group] : qkv_groups) {
    std::vector<std::string> absent;
    for (std::size_t part = 0; part < 3; ++part) {
      if (!group.parts[part].defined()) absent.emplace_back(qkv_names[part]);
    }
    if (!absent.empty()) {
      throw std::invalid_argument(fmt::format(
          "Hugging Face ViT state: {} needs query, key and value, but the checkpoint lacks {} (attention.attention.*)",
          fused_name, fmt::join(absent, ", ")));
    }
    // timm's fused qkv rows are [q; k; v], each laid out heads × head_dim as in HF.
    out[group.output_index].second = torch::cat({group.parts[0], group.parts[1], group.parts[2]}, 0);
  }
  return out;
}

void load_hf_vit_state(LayerStack& model, const NamedTensors& hf_state) {
  checkpoint::require_finite(hf_state, "the Hugging Face state given to load_hf_vit_state");
  copy_timm_state(model, hf_vit_to_timm_names(hf_state));
}

void load_pretrained(LayerStack& model, const std::string& path) {
  auto file = checkpoint::read_safetensors(path);
  checkpoint::require_finite(file.tensors, path);
  const bool hf = is_hf_vit_state(file.tensors);
  try {
    copy_timm_state(model, hf ? hf_vit_to_timm_names(file.tensors) : file.tensors);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(
        fmt::format("{} ({} names): {}", path, hf ? "Hugging Face ViT" : "timm", e.what()));
  }
}

}  // namespace colo::nn
