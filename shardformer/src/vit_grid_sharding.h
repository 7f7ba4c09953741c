#pragma once

// What Vit2dSharder (vit_2d_policy.h) and Vit25dSharder (vit_25d_policy.h) share: both put the
// ViT's blocks on a q×q grid (2.5D: its layer's grid) with Linear2D and LayerNorm2D, and differ
// only in the words of their problems, the depth group over which the parameter gradients are
// summed (none under 2D), and the mappings into and out of the blocks.
#include <c10/core/Device.h>
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
};

// Every reason the ViT cannot go on the grid (Vit2dSharder::problems' list), from the model or
// from its summary.
std::vector<std::string> vit_grid_problems(const nn::LayerStack& model, const VitGridWords& words,
                                           bool sequence_parallel);
std::vector<std::string> vit_grid_plan_problems(const nn::ModelSummary& model, const VitGridWords& words,
                                                bool sequence_parallel);
// Each replaced parameter's numel on one rank (the blocks' linear weights 1/q², their biases and
// LayerNorms 1/q), by canonical name.
std::map<std::string, int64_t> vit_grid_rank_numels(const nn::ModelSummary& model, int64_t q);

struct VitGridSharding {
  std::shared_ptr<Tp2dGrid> grid;            // the (layer's) q×q grid
  std::shared_ptr<dist::ProcessGroup> depth;  // 2.5D's depth group; null under 2D
  dist::ProcessGroup* tp = nullptr;           // the whole tensor-parallel group (dropout streams)
  std::function<torch::Tensor(const torch::Tensor&)> split;   // after the patch embedding
  std::function<torch::Tensor(const torch::Tensor&)> gather;  // before the classifier head
  uint64_t seed = 0;
  c10::Device device = c10::Device(c10::kCPU);
};

// Replaces the blocks' linears and LayerNorms in place, records their cuts, and sets the mappings
// and the dropout streams (vit_2d_policy.h's shard()). Call after the problems are checked.
void shard_vit_on_grid(nn::LayerStack& model, const VitGridSharding& how);

}  // namespace colo::shardformer
