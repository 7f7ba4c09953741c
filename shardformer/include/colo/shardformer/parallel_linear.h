#pragma once

#include <colo/nn/fp8_switchable.h>
#include <colo/nn/shard_spec.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

struct ParallelLinearOptions {
  // Column-parallel only: all-gather the output's last dim (every rank gets the whole Y).
  TORCH_ARG(bool, gather_output) = false;
  // Column-parallel only: the output features are `parts` consecutive blocks that are split each
  // on its own (qkv: [q; k; v], 3), so that every rank keeps matching rows of each block.
  TORCH_ARG(int64_t, parts) = 1;
  // > 0: sequence parallelism over this many real tokens (sequence_mappings.h): the input
  // (column) or output (row) is this rank's share of the tokens.
  TORCH_ARG(int64_t, sequence_tokens) = 0;
};

// Y = X·Aᵀ + b with the weight A [out, in] split by output features: A = [A_1; …; A_p] (rows),
// b = [b_1; …; b_p]; rank i computes Y_i = X·A_iᵀ + b_i, its 1/p of Y's features (or all of Y
// with gather_output). The input enters through copy_to_tp (its gradient summed over the
// ranks), or under sequence parallelism through gather_sequence_for_tp.
//
// Built from a whole linear layer's parameters: the SAME tensors are kept and cut in place to
// this rank's piece (set_data), so a parameter's identity survives (an optimizer built over the
// model still holds it) and its name is the replaced module's ("attn.qkv.weight"). The math runs
// through colo::nn::linear (so a zero-bubble pipeline can defer the weight gradient).
class ColumnParallelLinearImpl : public torch::nn::Module, public nn::Fp8SwitchableLayer {
 public:
  ColumnParallelLinearImpl(torch::Tensor weight, torch::Tensor bias, std::shared_ptr<dist::ProcessGroup> tp,
                           ParallelLinearOptions options = {});
  torch::Tensor forward(const torch::Tensor& x);

  // How the weight and bias are cut (dim 0, `parts` parts).
  nn::ShardSpec spec() const;
  const ParallelLinearOptions& options() const { return options_; }

  torch::Tensor weight;
  torch::Tensor bias;  // undefined for a bias-free layer

  // precision=fp8: this rank's piece multiplies in float8 (colo::nn::fp8_linear).
  std::pair<int64_t, int64_t> fp8_features() const override { return {weight.size(1), weight.size(0)}; }

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
  ParallelLinearOptions options_;
};
TORCH_MODULE(ColumnParallelLinear);

// Y = X·Aᵀ + b with the weight A [out, in] split by input features (columns): X = [X_1 … X_p]
// arrives split (a column-parallel layer's output), rank i computes X_i·A_iᵀ, and the partial
// products are summed by reduce_from_tp (or, under sequence parallelism, reduce-scattered over
// the tokens); b is whole on every rank and added once, after the sum.
// Built like ColumnParallelLinear, from the whole layer's parameters.
class RowParallelLinearImpl : public torch::nn::Module, public nn::Fp8SwitchableLayer {
 public:
  RowParallelLinearImpl(torch::Tensor weight, torch::Tensor bias, std::shared_ptr<dist::ProcessGroup> tp,
                        ParallelLinearOptions options = {});
  torch::Tensor forward(const torch::Tensor& x);

  // How the weight is cut (dim 1); the bias is whole.
  nn::ShardSpec spec() const;
  const ParallelLinearOptions& options() const { return options_; }

  torch::Tensor weight;
  torch::Tensor bias;

  std::pair<int64_t, int64_t> fp8_features() const override { return {weight.size(1), weight.size(0)}; }

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
  ParallelLinearOptions options_;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace colo::shardformer
