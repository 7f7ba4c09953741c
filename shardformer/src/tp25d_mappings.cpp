#include <colo/dist/process_group.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp25d_mappings.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp2d_mappings.h>
#include <colo/shardformer/tp_mappings.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>

#include "group_handle.h"

namespace colo::shardformer {
namespace {

// The depth step alone: this layer's 1/d of the batch (dim 0), and its mirror. The layer's 2D
// step is tp2d_mappings' (which checks the layer's share against q itself).
struct SplitBatch : torch::autograd::Function<SplitBatch> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    auto& depth = *from_handle(group);
    return x.chunk(depth.size(), 0)[depth.rank()].contiguous();
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {all_gather_along(g[0].contiguous(), 0, group_of(ctx)), torch::Tensor()};
  }
};

struct GatherBatch : torch::autograd::Function<GatherBatch> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return all_gather_along(x.contiguous(), 0, *from_handle(group));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto& depth = group_of(ctx);
    return {g[0].chunk(depth.size(), 0)[depth.rank()].contiguous(), torch::Tensor()};
  }
};

void check_splits(const torch::Tensor& x, const Tp25dGrid& grid) {
  const int64_t rows = static_cast<int64_t>(grid.depth()) * grid.q();
  if (x.dim() < 2 || x.size(0) % rows != 0 || x.size(-1) % grid.q() != 0) {
    throw std::invalid_argument(fmt::format("2.5D tensor parallelism: a tensor of shape [{}] does not split into "
                                            "{} x {} blocks (dim 0 must be a multiple of d·q = {}, the last dim of "
                                            "q = {})",
                                            fmt::join(x.sizes(), ", "), rows, grid.q(), rows, grid.q()));
  }
}

}  // namespace

torch::Tensor split_25d(const torch::Tensor& x, const Tp25dGrid& grid) {
  check_splits(x, grid);
  auto& depth = *grid.depth_group();
  const auto layer_share = depth.size() == 1 ? x : SplitBatch::apply(x, handle_of(depth));
  return split_2d(layer_share, *grid.layer_grid());
}

torch::Tensor gather_25d(const torch::Tensor& x, const Tp25dGrid& grid) {
  const auto layer_share = gather_2d(x, *grid.layer_grid());
  auto& depth = *grid.depth_group();
  return depth.size() == 1 ? layer_share : GatherBatch::apply(layer_share, handle_of(depth));
}

}  // namespace colo::shardformer
