#include <colo/dist/process_group.h>
#include <colo/nn/linear.h>
#include <colo/shardformer/linear_2d.h>
#include <colo/shardformer/summa.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp2d_mappings.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#include "keep_block.h"

namespace colo::shardformer {

Linear2DImpl::Linear2DImpl(torch::Tensor w, torch::Tensor b, std::shared_ptr<Tp2dGrid> grid, Linear2DOptions options)
    : grid_(require_grid(std::move(grid), "Linear2D")), options_(options) {
  if (!w.defined() || w.dim() != 2) throw std::invalid_argument("Linear2D: the weight must be [out, in]");
  keep_block(w, weight_cuts(), "Linear2D (weight)");
  weight = register_parameter("weight", w);
  if (b.defined()) {
    keep_block(b, bias_cuts(), "Linear2D (bias)");
    bias = register_parameter("bias", b);
  }
}

std::vector<nn::ShardSpec> Linear2DImpl::weight_cuts() const {
  return {{1, 1, grid_->q(), grid_->row()}, {0, options_.parts(), grid_->q(), grid_->column()}};
}

std::vector<nn::ShardSpec> Linear2DImpl::bias_cuts() const {
  return {{0, options_.parts(), grid_->q(), grid_->column()}};
}

torch::Tensor Linear2DImpl::forward(const torch::Tensor& x) {
  const auto& depth = options_.depth();
  if (grid_->q() == 1 && !depth) return nn::linear(x, weight, bias);
  // 2.5D: each layer's product saw its own share of the batch; the depth group sums the shares.
  const auto across_depth = [&](const torch::Tensor& p) { return depth ? replicated_in(p, *depth) : p; };
  auto y = summa_linear(x, across_depth(weight), *grid_);
  return bias.defined() ? y + across_depth(replicated_in(bias, grid_->column_group())) : y;
}

}  // namespace colo::shardformer
