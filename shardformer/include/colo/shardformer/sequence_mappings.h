#pragma once

// Sequence parallelism (Korthikanti et al. 2022): between tensor-parallel regions, LayerNorm,
// dropout and the residual adds run on this rank's share of the tokens instead of all of them, so
// their activations take 1/p of the memory. Tokens are dim 1 of [B, T, D]. T need not divide by
// the group size p: the sequence is padded with zero tokens to T' = p·ceil(T/p) where it is split
// and the padding dropped where it is gathered, so every tensor-parallel region (attention above
// all) sees exactly the T real tokens. Padding rows carry zeros in, receive zero gradients (nothing
// they feed reaches the loss), and so add nothing to any weight gradient.
//
// The four mappings, each with its conjugate backward (group g of size p, `tokens` = T):
#include <torch/types.h>

#include <cstdint>
#include <memory>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::nn {
class Layer;
}

namespace colo::shardformer {

// T' for T tokens over p ranks.
int64_t padded_tokens(int64_t tokens, int64_t ranks);

// Enters the sequence-parallel region from a replicated one: forward pads and keeps this rank's
// T'/p tokens; backward all-gathers and drops the padding.
torch::Tensor split_sequence(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group);

// Leaves it into a replicated region (e.g. the classifier head): forward all-gathers and drops the
// padding; backward pads and keeps this rank's share (every rank holds the same gradient there).
torch::Tensor gather_sequence(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group);

// Before a column-parallel linear (replaces copy_to_tp): forward all-gathers the T real tokens;
// backward pads and reduce-scatters, since each rank's gradient is a partial sum over its heads or
// hidden units.
torch::Tensor gather_sequence_for_tp(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group);

// After a row-parallel linear (replaces reduce_from_tp): forward pads and reduce-scatters the
// partial products, leaving this rank the sum for its tokens; backward all-gathers and drops the
// padding.
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group);

// Inside the sequence-parallel region a layer's whole parameters (those without a ShardSpec:
// LayerNorms, the biases added after a sum) see only this rank's tokens, so their gradients are
// partial sums: a hook on each completes the sum over `group` as the gradient arrives. Call it
// after the layer's splits are recorded.
void sum_partial_gradients(nn::Layer& layer, const std::shared_ptr<dist::ProcessGroup>& group);

}  // namespace colo::shardformer
