#pragma once

// Megatron's conjugate mappings between a replicated region and a tensor-parallel region, as
// autograd functions over a tensor-parallel group g of size p (Shoeybi et al. 2019, f and g;
// megatron/core/tensor_parallel/mappings.py). Each states its forward and its backward; the
// backward of one is the forward of its mirror, which is what keeps gradients exact.
//
// The group must outlive every autograd graph built through these functions.
#include <torch/types.h>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

// f: forward identity; backward all-reduce (sum) over g. Enters a column-parallel region: every
// rank consumes the same input, so the input's gradient is the sum of the ranks' parts.
torch::Tensor copy_to_tp(const torch::Tensor& x, dist::ProcessGroup& group);

// g (f's mirror): forward all-reduce (sum) over g; backward identity. Leaves a row-parallel
// region: the ranks' partial products add up to the output, whose gradient every rank needs whole.
torch::Tensor reduce_from_tp(const torch::Tensor& x, dist::ProcessGroup& group);

// forward: this rank's 1/p of the last dim; backward: all-gather along the last dim.
torch::Tensor split_last_dim(const torch::Tensor& x, dist::ProcessGroup& group);

// split_last_dim's mirror: forward all-gather along the last dim; backward: this rank's 1/p.
torch::Tensor gather_last_dim(const torch::Tensor& x, dist::ProcessGroup& group);

// Collectives along any dim (no autograd), shared with the sequence-parallel mappings: `x`
// concatenated over the group's ranks along `dim`, and the sum over the ranks of `x` of which
// this rank keeps its 1/p along `dim`.
torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, dist::ProcessGroup& group);
torch::Tensor reduce_scatter_along(const torch::Tensor& x, int64_t dim, dist::ProcessGroup& group);
torch::Tensor all_reduce_sum(const torch::Tensor& x, dist::ProcessGroup& group);
// The group's rank `src`'s `x` on every rank (no autograd). Every rank passes a tensor of the
// same shape and dtype; only src's values are read (2D tensor parallelism's SUMMA steps).
torch::Tensor broadcast_from(const torch::Tensor& x, int src, dist::ProcessGroup& group);

}  // namespace colo::shardformer
