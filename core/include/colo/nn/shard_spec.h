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

}  // namespace colo::nn
