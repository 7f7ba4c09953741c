#include <colo/dist/process_group.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/tp3d_mappings.h>
#include <colo/shardformer/tp_mappings.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>

#include "cube_handle.h"
#include "group_handle.h"

namespace colo::shardformer {
namespace {

// This rank's outer-layout block of a whole tensor: rows block j·q + k of q², features block i.
torch::Tensor outer_block(const torch::Tensor& whole, const Tp3dGrid& grid) {
  const int q = grid.q();
  return whole.chunk(q * q, 0)[grid.row_block(Tp3dLayout::kOuter)].chunk(q, -1)[grid.i()].contiguous();
}

// The whole tensor from every rank's outer-layout block.
torch::Tensor whole_of(const torch::Tensor& block, const Tp3dGrid& grid) {
  const auto rows = all_gather_along(block.contiguous(), -1, grid.i_group());
  return all_gather_along(rows, 0, grid.jk_plane());
}

struct SplitCube : torch::autograd::Function<SplitCube> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t cube) {
    ctx->saved_data["cube"] = cube;
    return outer_block(x, cube_at(cube));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {whole_of(g[0], cube_at(ctx->saved_data["cube"].toInt())), torch::Tensor()};
  }
};

struct GatherCube : torch::autograd::Function<GatherCube> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t cube) {
    ctx->saved_data["cube"] = cube;
    return whole_of(x, cube_at(cube));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {outer_block(g[0], cube_at(ctx->saved_data["cube"].toInt())), torch::Tensor()};
  }
};

struct GatherPieces : torch::autograd::Function<GatherPieces> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return all_gather_along(x.contiguous(), 0, *from_handle(group));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {reduce_scatter_along(g[0].contiguous(), 0, group_of(ctx)), torch::Tensor()};
  }
};

void check_splits(const torch::Tensor& x, const Tp3dGrid& grid) {
  const int64_t q = grid.q();
  if (x.dim() < 2 || x.size(0) % (q * q) != 0 || x.size(-1) % q != 0) {
    throw std::invalid_argument(fmt::format("3D tensor parallelism: a tensor of shape [{}] does not split into {} x {} "
                                            "blocks (dim 0 must be a multiple of q² = {}, the last dim of q = {})",
                                            fmt::join(x.sizes(), ", "), q * q, q, q * q, q));
  }
}

}  // namespace

torch::Tensor split_3d(const torch::Tensor& x, const Tp3dGrid& grid) {
  check_splits(x, grid);
  return grid.q() == 1 ? x : SplitCube::apply(x, cube_handle(grid));
}

torch::Tensor gather_3d(const torch::Tensor& x, const Tp3dGrid& grid) {
  return grid.q() == 1 ? x : GatherCube::apply(x, cube_handle(grid));
}

torch::Tensor gather_pieces(const torch::Tensor& x, dist::ProcessGroup& group) {
  return group.size() == 1 ? x : GatherPieces::apply(x, handle_of(group));
}

}  // namespace colo::shardformer
