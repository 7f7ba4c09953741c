#include <colo/nn/pretrained.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <colo/checkpoint/finite_check.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/files/files.h>

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

// "blocks.3.attn.qkv.weight" -> {"blocks.*.attn.qkv.weight", "3"}: names that differ only in
// their block number are one line of a mismatch report (a ViT-B has 12 of each).
std::pair<std::string, std::string> block_pattern(const std::string& name) {
  for (std::size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
    std::size_t end = dot + 1;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end > dot + 1 && end < name.size() && name[end] == '.') {
      return {name.substr(0, dot + 1) + "*" + name.substr(end), name.substr(dot + 1, end - dot - 1)};
    }
  }
  return {name, ""};
}

// One report section: items (name, detail) grouped by pattern and detail, at most kMaxLines lines.
constexpr std::size_t kMaxLines = 6;

std::string summarise(const char* title, const std::vector<std::pair<std::string, std::string>>& items) {
  if (items.empty()) return "";
  struct Group {
    std::string first_name;
    std::vector<std::string> blocks;
  };
  std::vector<std::pair<std::string, Group>> groups;  // keyed by pattern + detail, in first-seen order
  std::vector<std::string> details;
  for (const auto& [name, detail] : items) {
    auto [pattern, block] = block_pattern(name);
    const std::string key = pattern + "\n" + detail;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, {name, {}}});
      details.push_back(detail);
      it = groups.end() - 1;
    }
    if (!block.empty()) it->second.blocks.push_back(block);
  }
  std::string text = fmt::format("\n  {} ({}):", title, items.size());
  for (std::size_t i = 0; i < groups.size() && i < kMaxLines; ++i) {
    const Group& group = groups[i].second;
    std::string name = group.first_name;
    if (group.blocks.size() > 1) {
      // Files list names in byte order (blocks.10 before blocks.2): the range is numeric.
      long first = std::atol(group.blocks.front().c_str()), last = first;
      for (const auto& block : group.blocks) first = std::min(first, std::atol(block.c_str())), last = std::max(last, std::atol(block.c_str()));
      const std::string pattern = block_pattern(name).first;
      const auto star = pattern.find('*');
      name = fmt::format("{}{{{}..{}}}{} ({} blocks)", pattern.substr(0, star), first, last, pattern.substr(star + 1),
                         group.blocks.size());
    }
    text += "\n    " + name + (details[i].empty() ? "" : ": " + details[i]);
  }
  if (groups.size() > kMaxLines) text += fmt::format("\n    ... and {} more", groups.size() - kMaxLines);
  return text;
}

// load_timm_state without the finiteness check, which each public entry point makes once, on the
// names its caller knows (a Hugging Face file's own names, not the converted ones).
// `as_read` (default: full_state) is the file's own state, which the error describes: load_pretrained
// passes the state with the model's head put in, whose class count is not the file's.
void copy_timm_state(LayerStack& model, const NamedTensors& full_state, const NamedTensors* as_read = nullptr) {
  // A model sharded by tensor parallelism takes its piece of each split tensor (a tensor that
  // does not split the way the spec says stays whole, and is reported as mis-shaped below).
  const auto cuts = model.canonical_shard_cuts();
  NamedTensors state = full_state;
  for (auto& [name, tensor] : state) {
    const auto spec = cuts.find(name);
    if (spec == cuts.end() || !tensor.defined()) continue;
    try {
      tensor = shard_of(tensor, spec->second);
    } catch (const std::invalid_argument&) {
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& item : model.canonical_named_parameters()) targets.emplace_back(item.key(), item.value());
  for (const auto& item : model.canonical_named_buffers()) targets.emplace_back(item.key(), item.value());
  std::unordered_map<std::string, torch::Tensor> by_name(targets.begin(), targets.end());

  using Items = std::vector<std::pair<std::string, std::string>>;
  Items unexpected, mismatched, duplicated, missing;
  std::set<std::string> provided;
  for (const auto& [name, tensor] : state) {
    if (!provided.insert(name).second) {
      duplicated.emplace_back(name, "");
      continue;
    }
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      unexpected.emplace_back(name, "");
    } else if (!tensor.defined() || tensor.sizes() != it->second.sizes()) {
      mismatched.emplace_back(name, fmt::format("checkpoint {} vs model {}",
                                                tensor.defined() ? shape_text(tensor) : "undefined",
                                                shape_text(it->second)));
    }
  }
  for (const auto& [name, tensor] : targets) {
    if (provided.count(name) == 0) missing.emplace_back(name, "");
  }

  if (!missing.empty() || !unexpected.empty() || !mismatched.empty() || !duplicated.empty()) {
    std::string message = fmt::format("the checkpoint does not match the model ({} parameters and buffers):",
                                      targets.size());
    message += summarise("missing from the checkpoint", missing);
    message += summarise("in the checkpoint but not in the model", unexpected);
    message += summarise("shape mismatch", mismatched);
    message += summarise("listed more than once in the checkpoint", duplicated);
    const std::string checkpoint = describe_vit_state(as_read ? *as_read : full_state);
    const std::string wanted = describe_vit_state(NamedTensors(targets.begin(), targets.end()));
    if (!checkpoint.empty() && !wanted.empty() && checkpoint != wanted) {
      message += fmt::format("\n  the checkpoint holds a {}\n  the model is a {}", checkpoint, wanted);
    }
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

namespace {

const torch::Tensor* find_tensor(const NamedTensors& state, const std::string& name) {
  for (const auto& [n, t] : state) {
    if (n == name && t.defined()) return &t;
  }
  return nullptr;
}

// The square grid side of `tokens` position embeddings after one class token, or 0.
int64_t grid_side(int64_t tokens) {
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(tokens - 1))));
  return side > 0 && side * side == tokens - 1 ? side : 0;
}

// timm's resample_abs_pos_embed (num_prefix_tokens 1, bicubic, antialias, align_corners false).
torch::Tensor resample_pos_embed(const torch::Tensor& pos_embed, int64_t from_side, int64_t to_side) {
  namespace F = torch::nn::functional;
  torch::NoGradGuard no_grad;
  const auto dim = pos_embed.size(2);
  const auto prefix = pos_embed.narrow(1, 0, 1);
  auto grid = pos_embed.narrow(1, 1, from_side * from_side).to(torch::kFloat).reshape({1, from_side, from_side, dim});
  grid = F::interpolate(grid.permute({0, 3, 1, 2}), F::InterpolateFuncOptions()
                                                          .size(std::vector<int64_t>{to_side, to_side})
                                                          .mode(torch::kBicubic)
                                                          .align_corners(false)
                                                          .antialias(true));
  grid = grid.permute({0, 2, 3, 1}).reshape({1, to_side * to_side, dim}).to(pos_embed.scalar_type());
  return torch::cat({prefix, grid}, 1);
}

}  // namespace

std::string describe_vit_state(const NamedTensors& state) {
  const torch::Tensor* patch = find_tensor(state, "patch_embed.proj.weight");
  const torch::Tensor* pos = find_tensor(state, "pos_embed");
  if (patch == nullptr || pos == nullptr || patch->dim() != 4 || pos->dim() != 3) return "";
  int64_t depth = 0;
  for (const auto& [name, tensor] : state) {
    if (name.rfind("blocks.", 0) != 0) continue;
    depth = std::max<int64_t>(depth, std::atoll(name.c_str() + 7) + 1);
  }
  std::string text = fmt::format("ViT of patch {}, width {}, depth {}", patch->size(2), patch->size(0), depth);
  if (const torch::Tensor* fc1 = find_tensor(state, "blocks.0.mlp.fc1.weight")) text += fmt::format(", MLP {}", fc1->size(0));
  const int64_t tokens = pos->size(1);
  if (const int64_t side = grid_side(tokens)) {
    text += fmt::format(", {} tokens ({}x{} patches: {}x{} images)", tokens, side, side, side * patch->size(2),
                        side * patch->size(2));
  } else {
    text += fmt::format(", {} tokens", tokens);
  }
  text += fmt::format(", {} input channel{}", patch->size(1), patch->size(1) == 1 ? "" : "s");
  if (const torch::Tensor* head = find_tensor(state, "head.weight")) text += fmt::format(", {} classes", head->size(0));
  return text;
}

PretrainedWeights read_pretrained(const std::string& file_or_directory) {
  PretrainedWeights weights;
  weights.source = file_or_directory;
  std::string directory = files::parent_path(file_or_directory);
  NamedTensors state;
  if (files::is_directory(file_or_directory)) {
    directory = file_or_directory;
    if (!checkpoint::has_safetensors_set(directory, "model")) {
      throw std::invalid_argument(fmt::format(
          "{}: holds neither model.safetensors nor model.safetensors.index.json (a sharded set); give the "
          "directory Hugging Face or timm saved, or the .safetensors file itself",
          directory));
    }
    state = checkpoint::load_safetensors_set(directory, "model");
  } else {
    state = checkpoint::read_safetensors(file_or_directory).tensors;
  }
  checkpoint::require_finite(state, file_or_directory);
  weights.hugging_face = is_hf_vit_state(state);
  weights.state = weights.hugging_face ? hf_vit_to_timm_names(state) : std::move(state);
  const PretrainedNormalization normalization = read_pretrained_normalization(directory);
  weights.mean = normalization.mean;
  weights.std = normalization.std;
  return weights;
}

FineTuneReport load_pretrained(LayerStack& model, const PretrainedWeights& weights, const FineTuneOptions& options) {
  std::unordered_map<std::string, torch::Tensor> own;
  for (const auto& item : model.canonical_named_parameters()) own.emplace(item.key(), item.value());
  for (const auto& item : model.canonical_named_buffers()) own.emplace(item.key(), item.value());
  FineTuneReport report;
  NamedTensors state = weights.state;
  for (auto& [name, tensor] : state) {
    const auto it = own.find(name);
    if (it == own.end() || !tensor.defined() || tensor.sizes() == it->second.sizes()) continue;
    const torch::Tensor& mine = it->second;
    const bool head = name == "head.weight" || name == "head.bias" || name == "fc.weight" || name == "fc.bias";
    if (options.replace_head() && head && tensor.dim() == mine.dim() &&
        tensor.sizes().slice(1) == mine.sizes().slice(1)) {
      if (!report.head_replaced) {
        report.notes.push_back(fmt::format("head: {} classes in the checkpoint, {} in the model: re-initialised",
                                           tensor.size(0), mine.size(0)));
      }
      report.head_replaced = true;
      tensor = mine.detach().clone();  // the model keeps its own
      continue;
    }
    if (options.resample_pos_embed() && name == "pos_embed" && tensor.dim() == 3 && mine.dim() == 3 &&
        tensor.size(2) == mine.size(2)) {
      const int64_t from = grid_side(tensor.size(1));
      const int64_t to = grid_side(mine.size(1));
      if (from > 0 && to > 0) {
        tensor = resample_pos_embed(tensor, from, to);
        report.pos_embed_resampled = true;
        report.notes.push_back(fmt::format(
            "position embeddings: a {}x{} grid in the checkpoint, {}x{} in the model: resampled (bicubic, as timm)", from,
            from, to, to));
      }
    }
  }
  try {
    copy_timm_state(model, state, &weights.state);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{} ({} names): {}", weights.source,
                                            weights.hugging_face ? "Hugging Face ViT" : "timm", e.what()));
  }
  return report;
}

}  // namespace colo::nn
