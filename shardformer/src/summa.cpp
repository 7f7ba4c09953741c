#include <colo/shardformer/summa.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp_mappings.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace colo::shardformer {
namespace {

const Tp2dGrid& grid_at(int64_t handle) { return *reinterpret_cast<const Tp2dGrid*>(handle); }

struct Summa : torch::autograd::Function<Summa> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               int64_t grid_handle) {
    const auto& grid = grid_at(grid_handle);
    ctx->saved_data["grid"] = grid_handle;
    ctx->save_for_backward({x, w});
    torch::Tensor y;
    for (int k = 0; k < grid.q(); ++k) {
      const auto x_ik = broadcast_from(x, k, grid.row_group());
      const auto w_kj = broadcast_from(w, k, grid.column_group());
      auto term = torch::matmul(x_ik, w_kj.t());
      y = y.defined() ? y.add_(term) : term;
    }
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    const auto& grid = grid_at(ctx->saved_data["grid"].toInt());
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& w = saved[1];
    const auto dy = g[0].contiguous();
    const auto dy_rows = dy.reshape({-1, dy.size(-1)});
    // Every rank of the grid asks for the same gradients (the same module, the same graph), so
    // every rank runs the same collectives in the same order.
    const bool want_x = ctx->needs_input_grad(0);
    const bool want_w = ctx->needs_input_grad(1);
    std::vector<torch::Tensor> x_terms;  // term k: dY_ij · W_kj, reduced to column k
    std::vector<torch::Tensor> w_terms;  // term k: dY_ijᵀ · X_ik, reduced to row k
    for (int k = 0; k < grid.q(); ++k) {
      if (want_x) x_terms.push_back(torch::matmul(dy, broadcast_from(w, k, grid.column_group())));
      if (want_w) {
        const auto x_ik = broadcast_from(x, k, grid.row_group());
        w_terms.push_back(dy_rows.t().mm(x_ik.reshape({-1, x_ik.size(-1)})));
      }
    }
    torch::Tensor dx, dw;
    if (want_x) dx = reduce_scatter_along(torch::stack(x_terms), 0, grid.row_group()).squeeze(0);
    if (want_w) dw = reduce_scatter_along(torch::stack(w_terms), 0, grid.column_group()).squeeze(0);
    return {dx, dw, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor summa_linear(const torch::Tensor& x, const torch::Tensor& weight, const Tp2dGrid& grid) {
  return Summa::apply(x, weight, reinterpret_cast<int64_t>(&grid));
}

}  // namespace colo::shardformer
