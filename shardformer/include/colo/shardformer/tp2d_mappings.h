#pragma once

// The mappings between a replicated activation and 2D tensor parallelism's blocks, as autograd
// functions over a Tp2dGrid (tp2d_grid.h): an activation [B, S, H] is cut into q×q blocks, rank
// (i, j) holding [B/q, S, H/q], the i-th block of the batch and the j-th of the features. Each
// states its forward and its backward; the backward of one is the forward of its mirror (as the
// 1D mappings in tp_mappings.h). The grid must outlive every autograd graph built through these.
#include <torch/types.h>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

class Tp2dGrid;

// Forward: this rank's block of a replicated x (dim 0 by row i, the last dim by column j).
// Backward: the blocks' gradients all-gathered back to the whole (features over the row group,
// then batch over the column group): every rank consumed a different block of the one x.
// Throws std::invalid_argument when dim 0 or the last dim does not split q ways.
torch::Tensor split_2d(const torch::Tensor& x, const Tp2dGrid& grid);

// split_2d's mirror: forward all-gathers the blocks to the whole, replicated x; backward keeps
// this rank's block of the (replicated, hence identical) gradient.
torch::Tensor gather_2d(const torch::Tensor& x, const Tp2dGrid& grid);

// Forward: the sum of x over the group, on every rank; backward: the same sum of the gradients.
// For a sum that every rank then uses in a computation of its own (LayerNorm2D's statistics over
// a feature dimension split along the row): the ranks' output gradients differ, and each input
// reached all of them. (reduce_from_tp's identity backward is right only where what follows the
// sum is replicated.)
torch::Tensor shared_sum(const torch::Tensor& x, dist::ProcessGroup& group);

// Forward: x itself; backward: the sum of the gradients over the group. For a parameter block
// replicated down a column (Linear2D's and LayerNorm2D's bias and LayerNorm2D's weight: each rank
// of column j applies it to its own rows of the batch). copy_to_tp under the name of its use.
torch::Tensor replicated_in(const torch::Tensor& x, dist::ProcessGroup& group);

}  // namespace colo::shardformer
