#pragma once

// The mappings between a replicated activation and 2.5D tensor parallelism's blocks
// (tp25d_grid.h), as autograd functions: an activation [B, S, H] is cut by batch over depth × rows
// and by features over columns, rank (l, i, j) holding [B/(d·q), S, H/q]: the batch's d·q blocks
// are numbered l·q + i (layer l takes the l-th 1/d of the batch, and its grid cuts that as 2D
// does: tp2d_mappings.h), the features' j. The grid must outlive every autograd graph built
// through these.
#include <torch/types.h>

namespace colo::shardformer {

class Tp25dGrid;

// Forward: this rank's block of a replicated x. Backward: the blocks' gradients all-gathered back
// to the whole (within the layer as split_2d's backward, then the layers' shares over the depth
// group). Throws std::invalid_argument when dim 0 does not split d·q ways or the last dim q ways.
torch::Tensor split_25d(const torch::Tensor& x, const Tp25dGrid& grid);

// split_25d's mirror: forward all-gathers the blocks to the whole, replicated x; backward keeps
// this rank's block of the (replicated, hence identical) gradient.
torch::Tensor gather_25d(const torch::Tensor& x, const Tp25dGrid& grid);

}  // namespace colo::shardformer
