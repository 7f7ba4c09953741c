#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace colo::nn {

// How a parameter is split by tensor parallelism, so that whoever sees only this rank's piece
// (optimizer wrappers, the gradient norm, checkpoints, pretrained loading) knows what the whole
// is. The full tensor's dimension `dim` is cut into `parts` equal consecutive parts (a fused
// layer: qkv's rows are [q; k; v], 3 parts; 1 otherwise) and each part into `shards` equal
// consecutive shards; this rank holds shard `index` of every part, concatenated in part order.
// For qkv with 3 parts over tp = 2: rank 0 holds [q0; k0; v0], rank 1 [q1; k1; v1], each a half
// of the heads of q, k and v.
struct ShardSpec {
  int64_t dim = 0;
  int64_t parts = 1;
  int64_t shards = 1;
  int64_t index = 0;

  // The full size of `dim` given the local one, and the reverse. Throw std::invalid_argument when
  // the size does not split.
  int64_t full_size(int64_t local_size) const { return local_size * shards; }
  int64_t local_size(int64_t full_size) const;
  // "dim 0, 3 parts, shard 1 of 2".
  std::string describe() const;
};

// This rank's piece of a full tensor (a view where it is one slice, else a concatenation). Throws
// std::invalid_argument naming the spec when the full tensor's dimension does not split.
torch::Tensor shard_of(const torch::Tensor& full, const ShardSpec& spec);

// The full tensor from every shard's piece, pieces[i] being shard i's (the reverse of shard_of
// over i = 0 .. shards - 1).
torch::Tensor unshard(const std::vector<torch::Tensor>& pieces, const ShardSpec& spec);

// A parameter cut along more than one dimension (2D tensor parallelism: a weight block is rows of
// one output block and columns of one input block) is a list of one-dimensional cuts, applied in
// order: shard_of cuts `full` by cuts[0] (with its index), that piece by cuts[1], and so on. An
// empty list leaves `full` whole. Cuts of different dims commute; the order matters to unshard.
torch::Tensor shard_of(const torch::Tensor& full, const std::vector<ShardSpec>& cuts);

// The full tensor from every piece of a list of cuts (their `index` fields are not read): one
// piece per combination of the cuts' indices, ordered with the FIRST cut's index slowest and the
// last cut's fastest: pieces[(k0 * shards1 + k1) * shards2 + k2 ...] is the piece of indices
// (k0, k1, k2, ...). Linear2D lists its row index's cut first, so its pieces in tp-rank order
// (r = i * q + j) are in this order. Throws std::invalid_argument when the count of pieces is not
// the product of the cuts' shards.
torch::Tensor unshard(const std::vector<torch::Tensor>& pieces, const std::vector<ShardSpec>& cuts);

// How many distinct pieces a list of cuts makes: the product of their shards (1 for none). Over a
// tensor-parallel group of T ranks they are held by its first pieces_of ranks, in unshard's order,
// and repeat T / pieces_of times (2D's LayerNorms and biases: q pieces, repeated down the columns).
int64_t pieces_of(const std::vector<ShardSpec>& cuts);

}  // namespace colo::nn
