// Vit3dSharder (vit_3d_policy.h): colo's ViT under 3D tensor parallelism, through the work the
// grid modes share (vit_grid_sharding.h).
#include <colo/dist/process_group.h>
#include <colo/shardformer/layer_norm_3d.h>
#include <colo/shardformer/linear_3d.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/tp3d_mappings.h>
#include <colo/shardformer/vit_3d_policy.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#include "vit_grid_sharding.h"

namespace colo::shardformer {
namespace {

VitGridWords words_3d(int64_t q) {
  return {"3d", fmt::format("tp_mode=3d on a {}×{}×{} cube", q, q, q), q, q * q * q,
          "q³: the LayerNorms and the residual-side biases keep D/q³ features a rank",
          "each k slice of the cube"};
}

// qkv and fc1 read the residual stream (the outer layout); proj and fc2 write it.
bool reads_residual(const std::string& path) { return path == "attn.qkv" || path == "mlp.fc1"; }

}  // namespace

Vit3dSharder::Vit3dSharder(std::shared_ptr<Tp3dGrid> grid, Vit3dOptions options)
    : grid_(std::move(grid)), options_(options) {
  if (!grid_) throw std::invalid_argument("Vit3dSharder: the 3D cube is null");
}

std::vector<std::string> Vit3dSharder::problems(const nn::LayerStack& model) const {
  return vit_grid_problems(model, words_3d(grid_->q()), options_.sequence_parallel);
}

std::vector<std::string> Vit3dSharder::plan_problems(const nn::ModelSummary& model, int64_t q, bool sequence_parallel) {
  return vit_grid_plan_problems(model, words_3d(q), sequence_parallel);
}

std::map<std::string, int64_t> Vit3dSharder::rank_numels(const nn::ModelSummary& model, int64_t q) {
  return vit_grid_rank_numels(model, [q](const std::string& name, int64_t numel) {
    // qkv's and fc1's biases are cut by k alone; everything else the cube cuts q³ ways.
    const bool inner_bias = name == "attn.qkv.bias" || name == "mlp.fc1.bias";
    return inner_bias ? numel / q : numel / (q * q * q);
  });
}

void Vit3dSharder::shard(nn::LayerStack& model) const {
  check_problems(problems(model), grid_->tp().size());
  VitGridSharding how;
  how.linear = [grid = grid_](const std::string& path, int64_t parts, torch::Tensor weight, torch::Tensor bias) {
    const auto input = reads_residual(path) ? Tp3dLayout::kOuter : Tp3dLayout::kInner;
    Linear3D linear(std::move(weight), std::move(bias), grid, Linear3DOptions().input(input).parts(parts));
    return VitGridModule{torch::nn::AnyModule(linear), linear->weight_cuts(), linear->bias_cuts()};
  };
  how.norm = [grid = grid_](torch::Tensor weight, torch::Tensor bias, double eps) {
    LayerNorm3D norm(std::move(weight), std::move(bias), grid, LayerNorm3DOptions().eps(eps));
    return VitGridModule{torch::nn::AnyModule(norm), norm->weight_cuts(), norm->bias_cuts()};
  };
  // On a 1×1×1 cube LayerNorm3D is the block's own LayerNorm unfused: keep the block's.
  how.replace_norms = grid_->q() > 1;
  how.tp = &grid_->tp();
  how.split = [grid = grid_](const torch::Tensor& x) { return split_3d(x, *grid); };
  how.gather = [grid = grid_](const torch::Tensor& x) { return gather_3d(x, *grid); };
  how.seed = options_.seed;
  how.device = options_.device;
  shard_vit_on_grid(model, how);
}

}  // namespace colo::shardformer
