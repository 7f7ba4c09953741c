// What the 2D and 2.5D ViT sharders share (vit_grid_sharding.h); moved from vit_2d_policy.cpp.
#include "vit_grid_sharding.h"

#include <colo/dist/process_group.h>
#include <colo/nn/classifier_head.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/patch_embedding.h>
#include <colo/shardformer/layer_norm_2d.h>
#include <colo/shardformer/linear_2d.h>
#include <colo/shardformer/rng_tracker.h>
#include <colo/shardformer/tp2d_grid.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cctype>
#include <stdexcept>
#include <utility>

namespace colo::shardformer {
namespace {

// The sub-module at `path` inside `layer` (the block's own names: "attn.qkv", "norm1").
std::shared_ptr<torch::nn::Module> submodule(const nn::Layer& layer, const std::string& path) {
  for (const auto& item : layer.named_modules("", /*include_self=*/false)) {
    if (item.key() == path) return item.value();
  }
  throw std::logic_error(fmt::format("ViT sharder: the encoder block has no sub-module '{}'", path));
}

// A sub-module's own parameter `name` (undefined when it has none).
torch::Tensor own_parameter(const torch::nn::Module& module, const std::string& name) {
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    if (item.key() == name) return item.value();
  }
  return {};
}

void replace_linear(nn::EncoderBlock& block, const std::string& path, int64_t parts, const VitGridSharding& how) {
  const auto module = submodule(block, path);
  const auto bias = own_parameter(*module, "bias");
  auto made = how.linear(path, parts, own_parameter(*module, "weight"), bias);
  block.set_shard_cuts(path + ".weight", made.weight_cuts);
  if (bias.defined()) block.set_shard_cuts(path + ".bias", made.bias_cuts);
  block.replace_submodule(path, made.module);
}

void replace_norm(nn::EncoderBlock& block, const std::string& path, const VitGridSharding& how) {
  const auto module = std::dynamic_pointer_cast<torch::nn::LayerNormImpl>(submodule(block, path));
  if (!module) throw std::logic_error(fmt::format("ViT sharder: the encoder block's '{}' is not a LayerNorm", path));
  const auto weight = own_parameter(*module, "weight");
  const auto bias = own_parameter(*module, "bias");
  auto made = how.norm(weight, bias, module->options.eps());
  if (weight.defined()) block.set_shard_cuts(path + ".weight", made.weight_cuts);
  if (bias.defined()) block.set_shard_cuts(path + ".bias", made.bias_cuts);
  block.replace_submodule(path, made.module);
}

// "2D" for "2d", "2.5D" for "2.5d".
std::string upper(std::string mode) {
  for (auto& c : mode) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return mode;
}

// The sizes the problems check, from a block's heads and its fc1 weight [hidden, embed]; `block`
// false when the model has no encoder block.
std::vector<std::string> size_problems(const VitGridWords& words, bool sequence_parallel, bool block, int64_t heads,
                                       int64_t hidden, int64_t embed) {
  std::vector<std::string> found;
  const auto& grid = words.grid;
  const int64_t q = words.q;
  if (sequence_parallel) {
    found.push_back(fmt::format("{}: sequence parallelism is not supported with {} (the {} blocks already split every "
                                "activation by batch rows and features); turn sequence parallelism off or use "
                                "tp_mode=1d",
                                grid, words.mode, upper(words.mode)));
  }
  if (!block) {
    found.push_back(grid + ": the model has no ViT encoder block (nn::EncoderBlock) to shard");
    return found;
  }
  if (words.embed_multiple > 0 && embed % words.embed_multiple != 0) {
    found.push_back(fmt::format("{}: the embedding width {} does not divide by {} ({}): use a q whose cube divides {}",
                                grid, embed, words.embed_multiple, words.embed_why, embed));
  } else if (embed % q != 0) {
    found.push_back(fmt::format("{}: the embedding width {} does not divide by q={} (each grid column keeps D/q "
                                "features): use a q that divides {}",
                                grid, embed, q, embed));
  }
  if (heads % q != 0) {
    found.push_back(fmt::format("{}: {} heads do not divide by q={} ({} keeps whole heads): use a q that divides {}",
                                grid, heads, q, words.heads_keeper, heads));
  }
  if (hidden % q != 0) {
    found.push_back(fmt::format("{}: the MLP's {} hidden units do not divide by q={}: use a q that divides {}", grid,
                                hidden, q, hidden));
  }
  return found;
}

// The sub-modules the sharders replace, and what a rank keeps of their parameters.
constexpr const char* kLinears[] = {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"};
constexpr const char* kNorms[] = {"norm1", "norm2"};

// A block's fc1 weight in a summary (a layer with attention heads and "<name>.mlp.fc1.weight").
const nn::ParameterSummary* summary_fc1(const nn::LayerSummary& layer) {
  if (layer.attention_heads <= 0) return nullptr;
  for (const auto& p : layer.parameters) {
    if (p.name == layer.name + ".mlp.fc1.weight" && p.shape.size() == 2) return &p;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> vit_grid_problems(const nn::LayerStack& model, const VitGridWords& words,
                                           bool sequence_parallel) {
  const nn::EncoderBlock* block = nullptr;
  for (const auto& layer : model.layers()) {
    if ((block = dynamic_cast<const nn::EncoderBlock*>(layer.get()))) break;
  }
  if (!block) return size_problems(words, sequence_parallel, false, 0, 0, 0);
  // Every block of a ViT has the same shapes: the first one speaks for all.
  const auto fc1 = own_parameter(*submodule(*block, "mlp.fc1"), "weight");
  return size_problems(words, sequence_parallel, true, block->attention_heads(), fc1.size(0), fc1.size(1));
}

std::vector<std::string> vit_grid_plan_problems(const nn::ModelSummary& model, const VitGridWords& words,
                                                bool sequence_parallel) {
  for (const auto& layer : model.layers) {
    if (const auto* fc1 = summary_fc1(layer)) {
      return size_problems(words, sequence_parallel, true, layer.attention_heads, fc1->shape[0], fc1->shape[1]);
    }
  }
  return size_problems(words, sequence_parallel, false, 0, 0, 0);
}

std::map<std::string, int64_t> vit_grid_rank_numels(const nn::ModelSummary& model,
                                                    const std::function<int64_t(const std::string&, int64_t)>& share) {
  std::map<std::string, int64_t> numels;
  for (const auto& layer : model.layers) {
    if (!summary_fc1(layer)) continue;
    for (const auto& p : layer.parameters) {
      for (const char* module : kLinears) {
        for (const char* kind : {".weight", ".bias"}) {
          if (p.name == layer.name + "." + module + kind) numels[p.name] = share(std::string(module) + kind, p.numel);
        }
      }
      for (const char* module : kNorms) {
        for (const char* kind : {".weight", ".bias"}) {
          if (p.name == layer.name + "." + module + kind) numels[p.name] = share(std::string(module) + kind, p.numel);
        }
      }
    }
  }
  return numels;
}

std::map<std::string, int64_t> vit_grid_rank_numels(const nn::ModelSummary& model, int64_t q) {
  return vit_grid_rank_numels(model, [q](const std::string& name, int64_t numel) {
    const bool linear_weight = name.rfind("norm", 0) != 0 && name.size() > 7 && name.substr(name.size() - 7) == ".weight";
    return linear_weight ? numel / (q * q) : numel / q;
  });
}

void shard_vit_on_grid(nn::LayerStack& model, const VitGridSharding& how) {
  // Each rank holds a different block of every activation inside the blocks: its own masks.
  std::shared_ptr<nn::RegionRng> rng;
  if (how.tp->size() > 1) rng = std::make_shared<RngTracker>(how.seed, how.tp->rank(), how.device);
  const bool replace_norms = how.replace_norms;
  for (const auto& layer : model.layers()) {
    if (auto* embedding = dynamic_cast<nn::PatchEmbedding*>(layer.get())) embedding->set_output_mapping(how.split);
    if (auto* head = dynamic_cast<nn::ClassifierHead*>(layer.get())) head->set_input_mapping(how.gather);
    auto* block = dynamic_cast<nn::EncoderBlock*>(layer.get());
    if (!block) continue;
    if (replace_norms) replace_norm(*block, "norm1", how);
    replace_linear(*block, "attn.qkv", 3, how);
    replace_linear(*block, "attn.proj", 1, how);
    if (replace_norms) replace_norm(*block, "norm2", how);
    replace_linear(*block, "mlp.fc1", 1, how);
    replace_linear(*block, "mlp.fc2", 1, how);
    // The residual stream's dropout, too, draws on this rank's block (outputs_too). Drop-path
    // keeps the default stream: its per-sample mask must agree along a grid row (the same
    // samples), which the default generator, seeded alike on every rank, gives. The rows (and
    // 2.5D's layers) then draw the same masks for their different samples (correlated across
    // rows, each sample's still Bernoulli): a per-row stream would fix that; not needed while no
    // run trains with it.
    block->attn()->set_sharded_rng(rng, /*outputs_too=*/true);
    block->mlp()->set_sharded_rng(rng, /*outputs_too=*/true);
  }
}

void use_2d_modules(VitGridSharding& how, const std::shared_ptr<Tp2dGrid>& grid,
                    const std::shared_ptr<dist::ProcessGroup>& depth) {
  // The depth layers hold the same blocks: 2D's cuts say which ranks hold distinct pieces (the
  // first q² of the tp group, tp25d_grid.h) and the rest repeat them.
  how.linear = [grid, depth](const std::string&, int64_t parts, torch::Tensor weight, torch::Tensor bias) {
    Linear2D linear(std::move(weight), std::move(bias), grid, Linear2DOptions().parts(parts).depth(depth));
    return VitGridModule{torch::nn::AnyModule(linear), linear->weight_cuts(), linear->bias_cuts()};
  };
  how.norm = [grid, depth](torch::Tensor weight, torch::Tensor bias, double eps) {
    LayerNorm2D norm(std::move(weight), std::move(bias), grid, LayerNorm2DOptions().eps(eps).depth(depth));
    return VitGridModule{torch::nn::AnyModule(norm), norm->weight_cuts(), norm->bias_cuts()};
  };
  // On a 1 x 1 grid a LayerNorm2D is the block's own LayerNorm in unfused kernels, and a replaced
  // norm costs the block its fused residual-and-norm path: the norms stay, unless a depth group
  // must sum their gradients (2.5D with q = 1: each layer saw its own share of the batch).
  how.replace_norms = grid->q() > 1 || (depth && depth->size() > 1);
}

}  // namespace colo::shardformer
