// Vit2dSharder (vit_2d_policy.h): colo's ViT under 2D tensor parallelism. The work is shared with
// 2.5D's sharder (vit_grid_sharding.h).
#include <colo/dist/process_group.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp2d_mappings.h>
#include <colo/shardformer/vit_2d_policy.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#include "vit_grid_sharding.h"

namespace colo::shardformer {
namespace {

VitGridWords words_2d(int64_t q) { return {"2d", fmt::format("tp_mode=2d on a {}×{} grid", q, q), q, 0, "", "each grid column"}; }

}  // namespace

Vit2dSharder::Vit2dSharder(std::shared_ptr<Tp2dGrid> grid, Vit2dOptions options)
    : grid_(std::move(grid)), options_(options) {
  if (!grid_) throw std::invalid_argument("Vit2dSharder: the 2D grid is null");
}

std::vector<std::string> Vit2dSharder::problems(const nn::LayerStack& model) const {
  return vit_grid_problems(model, words_2d(grid_->q()), options_.sequence_parallel);
}

std::vector<std::string> Vit2dSharder::plan_problems(const nn::ModelSummary& model, int64_t q, bool sequence_parallel) {
  return vit_grid_plan_problems(model, words_2d(q), sequence_parallel);
}

std::map<std::string, int64_t> Vit2dSharder::rank_numels(const nn::ModelSummary& model, int64_t q) {
  return vit_grid_rank_numels(model, q);
}

void Vit2dSharder::shard(nn::LayerStack& model) const {
  check_problems(problems(model), grid_->tp().size());
  VitGridSharding how;
  use_2d_modules(how, grid_, nullptr);
  how.tp = &grid_->tp();
  how.split = [grid = grid_](const torch::Tensor& x) { return split_2d(x, *grid); };
  how.gather = [grid = grid_](const torch::Tensor& x) { return gather_2d(x, *grid); };
  how.seed = options_.seed;
  how.device = options_.device;
  shard_vit_on_grid(model, how);
}

}  // namespace colo::shardformer
