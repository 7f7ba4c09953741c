#pragma once

#include <colo/nn/shard_spec.h>
#include <colo/shardformer/tp3d_grid.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace colo::shardformer {

struct Linear3DOptions {
  // The layout of the input (tp3d_grid.h); the output is in the other one. Outer: qkv and fc1
  // (in features by i, out by k); inner: proj and fc2 (in by k, out by i).
  TORCH_ARG(Tp3dLayout, input) = Tp3dLayout::kOuter;
  // The output features are `parts` consecutive blocks split each on its own (qkv: [q; k; v], 3),
  // so that a rank keeps whole heads of each (as Linear2DOptions::parts). Outer input only.
  TORCH_ARG(int64_t, parts) = 1;
};

// Y = X·Aᵀ + b under 3D tensor parallelism on a q×q×q cube (tp3d_grid.h). With input features
// split by axis f and output features by axis g (outer input: f = i, g = k; inner: f = k, g = i),
// rank (i, j, k) holds the j-th sub-block, along the dim that i indexes, of the weight block
// A[out_g, in_f]. Forward:
//   X_g = all-gather of the input block over the g group   (this rank's j-th q-th of the batch)
//   A_b = all-gather of the weight piece over the j group  (the block A[out_g, in_f])
//   Y   = reduce-scatter over the f group of X_g · A_bᵀ     (the sum over in-blocks f; rows split)
// Backward: dY gathered over f; dX = reduce-scatter over g of dY_f · A_b; dA = reduce-scatter over
// j (along the cut dim) of dY_fᵀ · X_g. X_g and A_b are gathered again rather than kept from the
// forward, so the saved activations stay one block (as SUMMA's: summa.h).
//
// The bias b_g [out/q] (outer input, g = k) is kept whole on the q² ranks of the ij plane, its
// gradient summed over them; with an inner input (g = i) it is cut q³ ways like the LayerNorms
// (one [out/q³] piece a rank, gathered over the jk plane in the forward, its gradient
// reduce-scattered back): in both cases its distinct pieces sit on the tp group's first ranks in
// unshard's order, as nn::pieces_of reads them.
//
// Built from a whole linear layer's parameters like Linear2D: the same tensors cut in place to
// this rank's piece (set_data), so identity and name survive. At q = 1 the forward is
// colo::nn::linear (a zero-bubble pipeline can defer its weight gradient).
class Linear3DImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument for a null cube, a weight that is not [out, in] or does not
  // split, or parts > 1 with an inner input.
  Linear3DImpl(torch::Tensor weight, torch::Tensor bias, std::shared_ptr<Tp3dGrid> grid, Linear3DOptions options = {});
  torch::Tensor forward(const torch::Tensor& x);

  // How the weight is cut, in order: by i, by j (the same dim, the one i indexes), then by k. In
  // this order nn::unshard takes the q³ pieces in tp-rank order (r = i·q² + j·q + k).
  std::vector<nn::ShardSpec> weight_cuts() const;
  // Outer input: dim 0 by k (`parts` parts), q pieces; inner: dim 0 by i, j, k, q³ pieces.
  std::vector<nn::ShardSpec> bias_cuts() const;
  const Linear3DOptions& options() const { return options_; }
  const Tp3dGrid& grid() const { return *grid_; }

  torch::Tensor weight;
  torch::Tensor bias;  // undefined for a bias-free layer

 private:
  std::shared_ptr<Tp3dGrid> grid_;
  Linear3DOptions options_;
};
TORCH_MODULE(Linear3D);

}  // namespace colo::shardformer
