#include <colo/dist/process_group.h>
#include <colo/nn/linear.h>
#include <colo/shardformer/linear_3d.h>
#include <colo/shardformer/tp2d_mappings.h>
#include <colo/shardformer/tp3d_mappings.h>
#include <colo/shardformer/tp_mappings.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#include "cube_handle.h"
#include "keep_block.h"

namespace colo::shardformer {
namespace {

// The weight's dim that i indexes (and j cuts again): in (1) for an outer input, out (0) for an
// inner one.
int64_t cut_dim(Tp3dLayout input) { return input == Tp3dLayout::kOuter ? 1 : 0; }

// The product of the header's comment, with its backward.
struct CubeLinear : torch::autograd::Function<CubeLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               int64_t cube, int64_t input) {
    const auto& grid = cube_at(cube);
    const auto layout = static_cast<Tp3dLayout>(input);
    ctx->saved_data["cube"] = cube;
    ctx->saved_data["input"] = input;
    ctx->save_for_backward({x, w});
    const auto x_g = all_gather_along(x.contiguous(), 0, grid.row_group(layout));
    const auto a = all_gather_along(w, cut_dim(layout), grid.j_group());
    return reduce_scatter_along(torch::matmul(x_g, a.t()), 0, grid.feature_group(layout));
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    const auto& grid = cube_at(ctx->saved_data["cube"].toInt());
    const auto layout = static_cast<Tp3dLayout>(ctx->saved_data["input"].toInt());
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& w = saved[1];
    // The output's rows are split over the input's feature group (the reduce-scatter's).
    const auto dy = all_gather_along(g[0].contiguous(), 0, grid.feature_group(layout));
    // Every rank asks for the same gradients (one module, one graph): the same collectives, in
    // the same order, everywhere.
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      const auto a = all_gather_along(w, cut_dim(layout), grid.j_group());
      dx = reduce_scatter_along(torch::matmul(dy, a), 0, grid.row_group(layout));
    }
    if (ctx->needs_input_grad(1)) {
      const auto x_g = all_gather_along(x.contiguous(), 0, grid.row_group(layout));
      const auto block = dy.reshape({-1, dy.size(-1)}).t().mm(x_g.reshape({-1, x_g.size(-1)}));
      dw = reduce_scatter_along(block, cut_dim(layout), grid.j_group());
    }
    return {dx, dw, torch::Tensor(), torch::Tensor()};
  }
};

std::shared_ptr<Tp3dGrid> require_cube(std::shared_ptr<Tp3dGrid> grid, const char* who) {
  if (!grid) throw std::invalid_argument(fmt::format("{}: the 3D cube is null", who));
  return grid;
}

}  // namespace

Linear3DImpl::Linear3DImpl(torch::Tensor w, torch::Tensor b, std::shared_ptr<Tp3dGrid> grid, Linear3DOptions options)
    : grid_(require_cube(std::move(grid), "Linear3D")), options_(options) {
  if (!w.defined() || w.dim() != 2) throw std::invalid_argument("Linear3D: the weight must be [out, in]");
  if (options_.parts() != 1 && options_.input() == Tp3dLayout::kInner) {
    throw std::invalid_argument("Linear3D: a fused layer (parts > 1) must take the outer layout (its output "
                                "features are cut by k alone)");
  }
  keep_block(w, weight_cuts(), "Linear3D (weight)");
  weight = register_parameter("weight", w);
  if (b.defined()) {
    keep_block(b, bias_cuts(), "Linear3D (bias)");
    bias = register_parameter("bias", b);
  }
}

std::vector<nn::ShardSpec> Linear3DImpl::weight_cuts() const {
  const int64_t q = grid_->q();
  if (options_.input() == Tp3dLayout::kOuter) {
    return {{1, 1, q, grid_->i()}, {1, 1, q, grid_->j()}, {0, options_.parts(), q, grid_->k()}};
  }
  return {{0, 1, q, grid_->i()}, {0, 1, q, grid_->j()}, {1, 1, q, grid_->k()}};
}

std::vector<nn::ShardSpec> Linear3DImpl::bias_cuts() const {
  const int64_t q = grid_->q();
  if (options_.input() == Tp3dLayout::kOuter) return {{0, options_.parts(), q, grid_->k()}};
  return {{0, 1, q, grid_->i()}, {0, 1, q, grid_->j()}, {0, 1, q, grid_->k()}};
}

torch::Tensor Linear3DImpl::forward(const torch::Tensor& x) {
  if (grid_->q() == 1) return nn::linear(x, weight, bias);
  const auto input = options_.input();
  auto y = CubeLinear::apply(x, weight, cube_handle(*grid_), static_cast<int64_t>(input));
  if (!bias.defined()) return y;
  // The output's features are split by the other layout's feature axis; every rank of the plane
  // across it applies the same block of the bias to its own rows.
  if (input == Tp3dLayout::kOuter) return y + replicated_in(bias, grid_->ij_plane());
  return y + gather_pieces(bias, grid_->jk_plane());
}

}  // namespace colo::shardformer
