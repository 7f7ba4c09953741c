#include <colo/dist/process_group.h>
#include <colo/shardformer/layer_norm_3d.h>
#include <colo/shardformer/tp2d_mappings.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/tp3d_mappings.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#include "keep_block.h"

namespace colo::shardformer {

LayerNorm3DImpl::LayerNorm3DImpl(torch::Tensor w, torch::Tensor b, std::shared_ptr<Tp3dGrid> grid,
                                 LayerNorm3DOptions options)
    : grid_(std::move(grid)), options_(options) {
  if (!grid_) throw std::invalid_argument("LayerNorm3D: the 3D cube is null");
  if (w.defined()) {
    keep_block(w, weight_cuts(), "LayerNorm3D (weight)");
    weight = register_parameter("weight", w);
  }
  if (b.defined()) {
    keep_block(b, bias_cuts(), "LayerNorm3D (bias)");
    bias = register_parameter("bias", b);
  }
}

std::vector<nn::ShardSpec> LayerNorm3DImpl::weight_cuts() const {
  const int64_t q = grid_->q();
  return {{0, 1, q, grid_->i()}, {0, 1, q, grid_->j()}, {0, 1, q, grid_->k()}};
}

torch::Tensor LayerNorm3DImpl::forward(const torch::Tensor& x) {
  // Statistics in fp32 at least, as LayerNorm's kernels keep them for bf16 and fp16 inputs.
  const bool narrow = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
  const auto input = narrow ? x.to(torch::kFloat) : x;
  auto& features = grid_->i_group();
  const double count = static_cast<double>(input.size(-1) * grid_->q());
  const auto mean = shared_sum(input.sum(-1, /*keepdim=*/true), features) / count;
  const auto centred = input - mean;
  const auto variance = shared_sum(centred.square().sum(-1, /*keepdim=*/true), features) / count;
  auto y = centred * torch::rsqrt(variance + options_.eps());
  if (narrow) y = y.to(x.scalar_type());
  if (weight.defined()) y = y * gather_pieces(weight, grid_->jk_plane());
  if (bias.defined()) y = y + gather_pieces(bias, grid_->jk_plane());
  return y;
}

}  // namespace colo::shardformer
