// Vit25dSharder (vit_25d_policy.h): colo's ViT under 2.5D tensor parallelism, through the work it
// shares with 2D (vit_grid_sharding.h).
#include <colo/dist/process_group.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp25d_mappings.h>
#include <colo/shardformer/vit_25d_policy.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#include "vit_grid_sharding.h"

namespace colo::shardformer {
namespace {

VitGridWords words_25d(int64_t q, int64_t depth) {
  return {"2.5d", fmt::format("tp_mode=2.5d on {} layers of a {}×{} grid", depth, q, q), q, 0, "", "each grid column"};
}

}  // namespace

Vit25dSharder::Vit25dSharder(std::shared_ptr<Tp25dGrid> grid, Vit25dOptions options)
    : grid_(std::move(grid)), options_(options) {
  if (!grid_) throw std::invalid_argument("Vit25dSharder: the 2.5D grid is null");
}

std::vector<std::string> Vit25dSharder::problems(const nn::LayerStack& model) const {
  return vit_grid_problems(model, words_25d(grid_->q(), grid_->depth()), options_.sequence_parallel);
}

std::vector<std::string> Vit25dSharder::plan_problems(const nn::ModelSummary& model, int64_t q, int64_t depth,
                                                      bool sequence_parallel) {
  return vit_grid_plan_problems(model, words_25d(q, depth), sequence_parallel);
}

std::map<std::string, int64_t> Vit25dSharder::rank_numels(const nn::ModelSummary& model, int64_t q) {
  return vit_grid_rank_numels(model, q);
}

void Vit25dSharder::shard(nn::LayerStack& model) const {
  check_problems(problems(model), grid_->tp().size());
  VitGridSharding how;
  // One layer (d = 1) is 2D exactly: no depth group, so the modules keep 2D's paths (Linear2D
  // at q = 1 is colo::nn::linear, whose weight gradient a zero-bubble pipeline can defer).
  use_2d_modules(how, grid_->layer_grid(), grid_->depth() > 1 ? grid_->depth_group() : nullptr);
  how.tp = &grid_->tp();
  how.split = [grid = grid_](const torch::Tensor& x) { return split_25d(x, *grid); };
  how.gather = [grid = grid_](const torch::Tensor& x) { return gather_25d(x, *grid); };
  how.seed = options_.seed;
  how.device = options_.device;
  shard_vit_on_grid(model, how);
}

}  // namespace colo::shardformer
