#include <colo/dist/process_group.h>
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

// Autograd keeps the grid as its address (as group_handle.h does a group).
int64_t grid_handle(const Tp2dGrid& grid) { return reinterpret_cast<int64_t>(&grid); }
const Tp2dGrid& grid_of(torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<const Tp2dGrid*>(ctx->saved_data["grid"].toInt());
}

torch::Tensor block_of(const torch::Tensor& x, const Tp2dGrid& grid) {
  const int64_t q = grid.q();
  if (x.dim() < 2 || x.size(0) % q != 0 || x.size(-1) % q != 0) {
    throw std::invalid_argument(fmt::format("2D tensor parallelism: a tensor of shape [{}] does not split into {}x{} "
                                            "blocks (dim 0 and the last dim must be multiples of q = {})",
                                            fmt::join(x.sizes(), ", "), q, q, q));
  }
  return x.chunk(q, 0)[grid.row()].chunk(q, -1)[grid.column()].contiguous();
}

// The whole from every rank's block: features along the row (ordered by column j), then batch
// rows along the column (ordered by row i).
torch::Tensor whole_of(const torch::Tensor& block, const Tp2dGrid& grid) {
  return all_gather_along(all_gather_along(block, -1, grid.row_group()), 0, grid.column_group());
}

struct Split2d : torch::autograd::Function<Split2d> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t grid) {
    ctx->saved_data["grid"] = grid;
    return block_of(x, *reinterpret_cast<const Tp2dGrid*>(grid));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {whole_of(g[0].contiguous(), grid_of(ctx)), torch::Tensor()};
  }
};

struct Gather2d : torch::autograd::Function<Gather2d> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t grid) {
    ctx->saved_data["grid"] = grid;
    return whole_of(x.contiguous(), *reinterpret_cast<const Tp2dGrid*>(grid));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {block_of(g[0], grid_of(ctx)), torch::Tensor()};
  }
};

struct SharedSum : torch::autograd::Function<SharedSum> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return all_reduce_sum(x, *from_handle(group));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {all_reduce_sum(g[0], group_of(ctx)), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor split_2d(const torch::Tensor& x, const Tp2dGrid& grid) {
  return grid.q() == 1 ? x : Split2d::apply(x, grid_handle(grid));
}
torch::Tensor gather_2d(const torch::Tensor& x, const Tp2dGrid& grid) {
  return grid.q() == 1 ? x : Gather2d::apply(x, grid_handle(grid));
}
torch::Tensor shared_sum(const torch::Tensor& x, dist::ProcessGroup& group) {
  return group.size() == 1 ? x : SharedSum::apply(x, handle_of(group));
}
torch::Tensor replicated_in(const torch::Tensor& x, dist::ProcessGroup& group) { return copy_to_tp(x, group); }

}  // namespace colo::shardformer
