#pragma once

#include <colo/nn/shard_spec.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <memory>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

class Tp2dGrid;

struct LayerNorm2DOptions {
  // The replaced LayerNorm's eps (timm's ViT: 1e-6; torch's default 1e-5).
  TORCH_ARG(double, eps) = 1e-5;
  // 2.5D: the depth group, over which the weight's and bias's gradients are summed as well (see
  // Linear2DOptions::depth). Null (2D): none.
  TORCH_ARG(std::shared_ptr<dist::ProcessGroup>, depth) = nullptr;
};

// LayerNorm over the last dim under 2D tensor parallelism (tp2d_grid.h): the input is this
// rank's block [b/q, s, h/q], whose features are one q-th of the normalised dimension h; the
// mean and the (biased) variance are over the whole h, their partial sums summed over the row
// group (shared_sum: each rank normalises its own block with them, so their gradients are summed
// back too). Two passes (mean, then the centred squares), as LayerNorm computes them. Rank (i, j)
// holds the weight and bias blocks [h/q] of column j, the same down the column; their gradients
// are summed over the column group (replicated_in). Built like Linear2D from the whole layer's
// weight and bias (either may be undefined), the same tensors cut in place.
class LayerNorm2DImpl : public torch::nn::Module {
 public:
  LayerNorm2DImpl(torch::Tensor weight, torch::Tensor bias, std::shared_ptr<Tp2dGrid> grid,
                  LayerNorm2DOptions options = {});
  torch::Tensor forward(const torch::Tensor& x);

  // dim 0 by column j, for the weight and the bias alike.
  std::vector<nn::ShardSpec> weight_cuts() const;
  std::vector<nn::ShardSpec> bias_cuts() const { return weight_cuts(); }
  const LayerNorm2DOptions& options() const { return options_; }

  torch::Tensor weight;
  torch::Tensor bias;

 private:
  std::shared_ptr<Tp2dGrid> grid_;
  LayerNorm2DOptions options_;
};
TORCH_MODULE(LayerNorm2D);

}  // namespace colo::shardformer
