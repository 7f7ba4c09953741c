#pragma once

#include <colo/nn/shard_spec.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

class Tp2dGrid;

struct Linear2DOptions {
  // The output features are `parts` consecutive blocks split each on its own (qkv: [q; k; v],
  // 3), so that column j keeps matching rows of each block: whole heads of q, k and v (as
  // ParallelLinearOptions::parts).
  TORCH_ARG(int64_t, parts) = 1;
  // 2.5D (tp25d_grid.h): the depth group, the ranks that hold this same block in the other
  // layers, each for its own share of the batch: the weight's and the bias's gradients are summed
  // over it (replicated_in in the forward), so the copies stay equal. Null (2D): none.
  TORCH_ARG(std::shared_ptr<dist::ProcessGroup>, depth) = nullptr;
};

// Y = X·Aᵀ + b under 2D tensor parallelism on a q×q grid (tp2d_grid.h). Rank (i, j) holds the
// weight block A[out_j, in_i] [out/q, in/q] (rows of the j-th output block, columns of the i-th
// input block) and the bias block b_j [out/q], the same on every rank of column j. The input is
// this rank's block X_ij [b/q, s, in/q] (split_2d's, or an earlier 2D layer's output), the
// output its block Y_ij [b/q, s, out/q] = Σ_k X_ik · A[out_j, in_k]ᵀ + b_j, through SUMMA
// (summa.h). The bias gradient is summed over the column group (replicated_in), so the column's
// copies stay equal.
//
// Built from a whole linear layer's parameters like ColumnParallelLinear: the SAME tensors are
// kept and cut in place to this rank's block (set_data), so a parameter's identity and name
// ("attn.qkv.weight") survive. At q = 1 (without a depth group) the forward is colo::nn::linear
// itself (a zero-bubble pipeline can defer its weight gradient); at q > 1, or with a depth group,
// the products sit inside SUMMA's autograd function, which colo::nn::linear's deferral does not
// reach (a deferred gradient would land in the depth mapping's output, not the parameter).
class Linear2DImpl : public torch::nn::Module {
 public:
  Linear2DImpl(torch::Tensor weight, torch::Tensor bias, std::shared_ptr<Tp2dGrid> grid, Linear2DOptions options = {});
  torch::Tensor forward(const torch::Tensor& x);

  // How the weight is cut, in order: dim 1 (input features) by row i, then dim 0 (output
  // features, `parts` parts) by column j. In this order nn::unshard takes the blocks in tp-rank
  // order (r = i·q + j).
  std::vector<nn::ShardSpec> weight_cuts() const;
  // dim 0 by column j (`parts` parts); the ranks of a column hold the same block.
  std::vector<nn::ShardSpec> bias_cuts() const;
  const Linear2DOptions& options() const { return options_; }
  const Tp2dGrid& grid() const { return *grid_; }

  torch::Tensor weight;
  torch::Tensor bias;  // undefined for a bias-free layer

 private:
  std::shared_ptr<Tp2dGrid> grid_;
  Linear2DOptions options_;
};
TORCH_MODULE(Linear2D);

}  // namespace colo::shardformer
