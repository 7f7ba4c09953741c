#pragma once

#include <colo/nn/shard_spec.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <memory>
#include <vector>

namespace colo::shardformer {

class Tp3dGrid;

struct LayerNorm3DOptions {
  // The replaced LayerNorm's eps (timm's ViT: 1e-6; torch's default 1e-5).
  TORCH_ARG(double, eps) = 1e-5;
};

// LayerNorm over the last dim under 3D tensor parallelism, on the cube's outer layout
// (tp3d_grid.h: the residual stream, [b/q², s, h/q], features block i): the mean and the (biased)
// variance are over the whole h, their partial sums summed over the i group (shared_sum), in two
// passes as LayerNorm2D. The weight and the bias of features block i are used by the q² ranks of
// the jk plane, each on its own rows: each rank stores one q³-th ([h/q³], cut by i, j, k: the
// tp-rank order nn::unshard reads) and the forward gathers the block over the plane, whose
// backward reduce-scatters the gradient (the sum over the plane's rows, and the cut) back.
class LayerNorm3DImpl : public torch::nn::Module {
 public:
  LayerNorm3DImpl(torch::Tensor weight, torch::Tensor bias, std::shared_ptr<Tp3dGrid> grid,
                  LayerNorm3DOptions options = {});
  torch::Tensor forward(const torch::Tensor& x);

  // dim 0 by i, j and k, for the weight and the bias alike.
  std::vector<nn::ShardSpec> weight_cuts() const;
  std::vector<nn::ShardSpec> bias_cuts() const { return weight_cuts(); }
  const LayerNorm3DOptions& options() const { return options_; }

  torch::Tensor weight;
  torch::Tensor bias;

 private:
  std::shared_ptr<Tp3dGrid> grid_;
  LayerNorm3DOptions options_;
};
TORCH_MODULE(LayerNorm3D);

}  // namespace colo::shardformer
