#pragma once

// What the ViT sharders of the grid modes share (Vit2dSharder, Vit25dSharder, Vit3dSharder): each
// replaces every encoder block's four linears and two LayerNorms by its mode's modules (the
// factories of VitGridSharding), splits the patch embedding's output into this rank's block and
// gathers the head's input back, and gives the blocks a dropout stream per tp rank. They differ
// in the words of their problems, the modules, and the mappings.
#include <c10/core/Device.h>
#include <colo/nn/shard_spec.h>
#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::nn {
class LayerStack;
struct ModelSummary;
}  // namespace colo::nn

namespace colo::shardformer {

class Tp2dGrid;

// How a problem names the layout: the mode ("2d", "2.5d") and the grid ("tp_mode=2d on a 2×2
// grid", "tp_mode=2.5d on 2 layers of a 2×2 grid"), and the side q the sizes must divide by.
struct VitGridWords {
  std::string mode;
  std::string grid;
  int64_t q;
  // What the embedding width must divide by, and why (3D: q³, "the LayerNorms keep D/q³ features
  // a rank"); 0: q, each grid column keeping D/q features.
  int64_t embed_multiple = 0;
  std::string embed_why;
  // Who keeps whole heads, as the refusal says it.
  std::string heads_keeper = "each grid column";
};

// Every reason the ViT cannot go on the grid (Vit2dSharder::problems' list), from the model or
// from its summary.
std::vector<std::string> vit_grid_problems(const nn::LayerStack& model, const VitGridWords& words,
                                           bool sequence_parallel);
std::vector<std::string> vit_grid_plan_problems(const nn::ModelSummary& model, const VitGridWords& words,
                                                bool sequence_parallel);
// Each replaced parameter's numel on one rank, by canonical name: `share` gives it from the
// parameter's name inside its block ("attn.qkv.bias", "norm1.weight") and its whole numel.
std::map<std::string, int64_t> vit_grid_rank_numels(const nn::ModelSummary& model,
                                                    const std::function<int64_t(const std::string&, int64_t)>& share);
// 2D's (and 2.5D's) shares: the blocks' linear weights 1/q², their biases and LayerNorms 1/q.
std::map<std::string, int64_t> vit_grid_rank_numels(const nn::ModelSummary& model, int64_t q);

// A block's linear or LayerNorm as a mode replaces it: the new module (holding the same
// parameter tensors, cut in place) and the cuts to record for its weight and bias.
struct VitGridModule {
  torch::nn::AnyModule module;
  std::vector<nn::ShardSpec> weight_cuts;
  std::vector<nn::ShardSpec> bias_cuts;
};

struct VitGridSharding {
  // The mode's linear for the block's sub-module `path` ("attn.qkv", "attn.proj", "mlp.fc1",
  // "mlp.fc2"; `parts` 3 for qkv), from its weight and bias (undefined when it has none).
  std::function<VitGridModule(const std::string& path, int64_t parts, torch::Tensor weight, torch::Tensor bias)> linear;
  // The mode's LayerNorm from the replaced one's weight, bias and eps.
  std::function<VitGridModule(torch::Tensor weight, torch::Tensor bias, double eps)> norm;
  // False where the mode's LayerNorm would be the block's own in unfused kernels (a 1 x 1 grid
  // with nothing to sum its gradients over): the norms stay, keeping the fused residual path.
  bool replace_norms = true;
  dist::ProcessGroup* tp = nullptr;  // the whole tensor-parallel group (dropout streams)
  std::function<torch::Tensor(const torch::Tensor&)> split;   // after the patch embedding
  std::function<torch::Tensor(const torch::Tensor&)> gather;  // before the classifier head
  uint64_t seed = 0;
  c10::Device device = c10::Device(c10::kCPU);
};

// 2D's linear and LayerNorm (Linear2D, LayerNorm2D) on `grid`, with 2.5D's depth group (null: 2D).
void use_2d_modules(VitGridSharding& how, const std::shared_ptr<Tp2dGrid>& grid,
                    const std::shared_ptr<dist::ProcessGroup>& depth);

// Replaces the blocks' linears and LayerNorms in place, records their cuts, and sets the mappings
// and the dropout streams (vit_2d_policy.h's shard()). Call after the problems are checked.
void shard_vit_on_grid(nn::LayerStack& model, const VitGridSharding& how);

}  // namespace colo::shardformer
