#include <colo/dist/process_group.h>
#include <colo/shardformer/layer_norm_2d.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp2d_mappings.h>
#include <torch/torch.h>

#include <utility>

#include "keep_block.h"

namespace colo::shardformer {

LayerNorm2DImpl::LayerNorm2DImpl(torch::Tensor w, torch::Tensor b, std::shared_ptr<Tp2dGrid> grid,
                                 LayerNorm2DOptions options)
    : grid_(require_grid(std::move(grid), "LayerNorm2D")), options_(options) {
  if (w.defined()) {
    keep_block(w, weight_cuts(), "LayerNorm2D (weight)");
    weight = register_parameter("weight", w);
  }
  if (b.defined()) {
    keep_block(b, bias_cuts(), "LayerNorm2D (bias)");
    bias = register_parameter("bias", b);
  }
}

std::vector<nn::ShardSpec> LayerNorm2DImpl::weight_cuts() const { return {{0, 1, grid_->q(), grid_->column()}}; }

torch::Tensor LayerNorm2DImpl::forward(const torch::Tensor& x) {
  // Statistics in fp32 at least, as LayerNorm's kernels keep them for bf16 and fp16 inputs.
  const bool narrow = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
  const auto input = narrow ? x.to(torch::kFloat) : x;
  auto& row = grid_->row_group();
  const double features = static_cast<double>(input.size(-1) * grid_->q());
  const auto mean = shared_sum(input.sum(-1, /*keepdim=*/true), row) / features;
  const auto centred = input - mean;
  const auto variance = shared_sum(centred.square().sum(-1, /*keepdim=*/true), row) / features;
  auto y = centred * torch::rsqrt(variance + options_.eps());
  if (narrow) y = y.to(x.scalar_type());
  // Each column's copy saw the column's rows of the batch (and, under 2.5D, each layer's its share).
  const auto shared = [&](const torch::Tensor& p) {
    const auto in_column = replicated_in(p, grid_->column_group());
    return options_.depth() ? replicated_in(in_column, *options_.depth()) : in_column;
  };
  if (weight.defined()) y = y * shared(weight);
  if (bias.defined()) y = y + shared(bias);
  return y;
}

}  // namespace colo::shardformer
