#pragma once

// The mappings of 3D tensor parallelism (tp3d_grid.h), as autograd functions: between a
// replicated activation [B, S, H] and this rank's block of it in the cube's outer layout
// [B/q², S, H/q] (rows block j·q + k, features block i), and the gather of a parameter cut over a
// group. The grid and the groups must outlive every autograd graph built through these.
#include <torch/types.h>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

class Tp3dGrid;

// Forward: this rank's outer-layout block of a replicated x. Backward: the blocks' gradients
// all-gathered back to the whole (features over the i group, then rows over the jk plane).
// Throws std::invalid_argument when dim 0 does not split q² ways or the last dim q ways.
torch::Tensor split_3d(const torch::Tensor& x, const Tp3dGrid& grid);

// split_3d's mirror: forward all-gathers the outer-layout blocks to the whole, replicated x;
// backward keeps this rank's block of the (replicated, hence identical) gradient.
torch::Tensor gather_3d(const torch::Tensor& x, const Tp3dGrid& grid);

// Forward: the group's pieces of x concatenated along dim 0 (the whole of a parameter cut over
// the group); backward: the gradients summed over the group, of which this rank keeps its piece
// (a reduce-scatter). For a parameter every rank of the group applies whole to its own rows (3D's
// LayerNorms and outer-side biases, each stored as one q³-th and gathered over the jk plane).
torch::Tensor gather_pieces(const torch::Tensor& x, dist::ProcessGroup& group);

}  // namespace colo::shardformer
