#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace colo::zero {

// Which elements of which parameter each of `world_size` data-parallel ranks owns under ZeRO.
//
// Parameters are PACKED into flat buckets (the gradient buckets: ddp::assign_buckets' grouping,
// reverse registration order), each bucket padded to a multiple of world_size and split into
// world_size equal, contiguous chunks; rank r owns chunk r of every bucket. A rank's SHARD is
// the concatenation of its chunks, bucket by bucket: shard_numel() elements, the same on every
// rank. A parameter may straddle two ranks' chunks.
//
// Why packed buckets rather than each parameter padded and split on its own (Colossal-AI's
// layout): a bucket is then one contiguous buffer, so backward gradients enter a reduce-scatter
// with one cat per bucket rather than a strided copy per parameter; the working parameters can
// be views into the all-gather's output, so the gathered weights need no unpacking; and
// padding costs at most world_size - 1 elements per bucket instead of per parameter.
//
//   bucket b:  | p3 | p2 | p1 |pad|      numel(b) = sum of its parameters, padded_numel(b) = world × chunk(b)
//              |rank 0 |rank 1 |rank 2 |
class ShardLayout {
 public:
  // What of one parameter lies in a rank's shard: elements [param_offset, param_offset + numel)
  // of the flattened parameter are shard elements [shard_offset, shard_offset + numel).
  struct Piece {
    std::size_t param;
    int64_t param_offset;
    int64_t shard_offset;
    int64_t numel;
  };

  // `numels`: the parameters' element counts; `buckets`: indices into them, every parameter in
  // exactly one bucket, in launch order. Throws std::invalid_argument for a world size below 1,
  // a negative count or a parameter in no bucket or in two.
  ShardLayout(std::vector<int64_t> numels, std::vector<std::vector<std::size_t>> buckets, int world_size);

  int world_size() const { return world_size_; }
  std::size_t num_params() const { return numels_.size(); }
  std::size_t num_buckets() const { return buckets_.size(); }
  int64_t param_numel(std::size_t param) const { return numels_.at(param); }
  // Every parameter's elements, without padding.
  int64_t total_numel() const { return total_numel_; }

  const std::vector<std::size_t>& bucket_params(std::size_t bucket) const { return buckets_.at(bucket); }
  // Elements of bucket b's parameters, and of its padded buffer (a multiple of world_size).
  int64_t bucket_numel(std::size_t bucket) const { return bucket_numel_.at(bucket); }
  int64_t padded_bucket_numel(std::size_t bucket) const { return chunk_numel_.at(bucket) * world_size_; }
  // Elements of bucket b each rank owns (its padded size / world_size).
  int64_t chunk_numel(std::size_t bucket) const { return chunk_numel_.at(bucket); }
  // Where bucket b's chunk starts in every rank's shard.
  int64_t chunk_offset(std::size_t bucket) const { return chunk_offset_.at(bucket); }
  // Elements of rank's chunk of bucket b that are parameter elements (the rest is padding).
  int64_t valid_chunk_numel(std::size_t bucket, int rank) const;
  // The bucket holding parameter p, and where p starts in its bucket.
  std::size_t bucket_of(std::size_t param) const { return bucket_of_.at(param); }
  int64_t offset_in_bucket(std::size_t param) const { return offset_in_bucket_.at(param); }

  // Elements of one rank's shard, padding included: the same on every rank.
  int64_t shard_numel() const { return shard_numel_; }
  // Padding elements in rank's shard.
  int64_t padding_numel(int rank) const;
  // What rank's shard holds, in shard order (pieces of zero elements left out).
  std::vector<Piece> pieces(int rank) const;

  // rank's shard of full tensors (one per parameter, in parameter order, each with the
  // parameter's element count, any shape, device and dtype), written into `shard` (a flat tensor
  // of shard_numel() elements: it keeps its dtype and device; padding is zeroed).
  void copy_to_shard(int rank, const std::vector<torch::Tensor>& full, torch::Tensor& shard) const;
  // The reverse, for every rank at once: `gathered` is every rank's shard, rank after rank
  // (world_size() × shard_numel() elements, what an all-gather of the shards gives). Returns one
  // flat tensor per parameter, of gathered's dtype and device (views: into a copy of gathered,
  // or into gathered itself with one rank).
  std::vector<torch::Tensor> unshard(const torch::Tensor& gathered) const;

 private:
  void check_rank(int rank) const;

  std::vector<int64_t> numels_;
  std::vector<std::vector<std::size_t>> buckets_;
  int world_size_;
  int64_t total_numel_ = 0;
  int64_t shard_numel_ = 0;
  std::vector<int64_t> bucket_numel_, chunk_numel_, chunk_offset_;
  std::vector<std::size_t> bucket_of_;
  std::vector<int64_t> offset_in_bucket_;
};

}  // namespace colo::zero
