#include <colo/zero/shard_layout.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace colo::zero {

ShardLayout::ShardLayout(std::vector<int64_t> numels, std::vector<std::vector<std::size_t>> buckets, int world_size)
    : numels_(std::move(numels)), buckets_(std::move(buckets)), world_size_(world_size) {
  if (world_size_ < 1) {
    throw std::invalid_argument(fmt::format("ShardLayout: the world size must be at least 1, got {}", world_size_));
  }
  constexpr auto kNone = static_cast<std::size_t>(-1);
  bucket_of_.assign(numels_.size(), kNone);
  offset_in_bucket_.assign(numels_.size(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    int64_t offset = 0;
    for (auto p : buckets_[b]) {
      if (p >= numels_.size() || bucket_of_[p] != kNone) {
        throw std::invalid_argument(fmt::format(
            "ShardLayout: bucket {} lists parameter {}, which is out of range ({} parameters) or in another bucket too",
            b, p, numels_.size()));
      }
      if (numels_[p] < 0) {
        throw std::invalid_argument(fmt::format("ShardLayout: parameter {} has {} elements", p, numels_[p]));
      }
      bucket_of_[p] = b;
      offset_in_bucket_[p] = offset;
      offset += numels_[p];
    }
    const int64_t chunk = (offset + world_size_ - 1) / world_size_;
    bucket_numel_.push_back(offset);
    chunk_numel_.push_back(chunk);
    chunk_offset_.push_back(shard_numel_);
    shard_numel_ += chunk;
    total_numel_ += offset;
  }
  for (std::size_t p = 0; p < numels_.size(); ++p) {
    if (bucket_of_[p] == kNone)
      throw std::invalid_argument(fmt::format("ShardLayout: parameter {} is in no bucket", p));
  }
}

void ShardLayout::check_rank(int rank) const {
  if (rank < 0 || rank >= world_size_) {
    throw std::out_of_range(fmt::format("ShardLayout: rank {} is outside the world of {}", rank, world_size_));
  }
}

int64_t ShardLayout::valid_chunk_numel(std::size_t bucket, int rank) const {
  check_rank(rank);
  const int64_t begin = rank * chunk_numel(bucket);
  return std::clamp<int64_t>(bucket_numel(bucket) - begin, 0, chunk_numel(bucket));
}

int64_t ShardLayout::padding_numel(int rank) const {
  int64_t valid = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) valid += valid_chunk_numel(b, rank);
  return shard_numel_ - valid;
}

std::vector<ShardLayout::Piece> ShardLayout::pieces(int rank) const {
  check_rank(rank);
  std::vector<Piece> out;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const int64_t chunk_begin = rank * chunk_numel_[b];
    const int64_t chunk_end = chunk_begin + chunk_numel_[b];
    for (auto p : buckets_[b]) {
      const int64_t begin = std::max(offset_in_bucket_[p], chunk_begin);
      const int64_t end = std::min(offset_in_bucket_[p] + numels_[p], chunk_end);
      if (end <= begin) continue;
      out.push_back({p, begin - offset_in_bucket_[p], chunk_offset_[b] + begin - chunk_begin, end - begin});
    }
  }
  return out;
}

void ShardLayout::copy_to_shard(int rank, const std::vector<torch::Tensor>& full, torch::Tensor& shard) const {
  if (full.size() != numels_.size()) {
    throw std::invalid_argument(
        fmt::format("ShardLayout::copy_to_shard: {} tensors for {} parameters", full.size(), numels_.size()));
  }
  for (std::size_t p = 0; p < full.size(); ++p) {
    if (!full[p].defined() || full[p].numel() != numels_[p]) {
      throw std::invalid_argument(fmt::format("ShardLayout::copy_to_shard: tensor {} has {} elements, the parameter {}",
                                              p, full[p].defined() ? full[p].numel() : 0, numels_[p]));
    }
  }
  if (!shard.defined() || shard.dim() != 1 || shard.numel() != shard_numel_) {
    throw std::invalid_argument(
        fmt::format("ShardLayout::copy_to_shard: the shard must be a flat tensor of {} elements", shard_numel_));
  }
  torch::NoGradGuard no_grad;
  shard.zero_();
  for (const auto& piece : pieces(rank)) {
    shard.narrow(0, piece.shard_offset, piece.numel)
        .copy_(full[piece.param].reshape(-1).narrow(0, piece.param_offset, piece.numel));
  }
}

std::vector<torch::Tensor> ShardLayout::unshard(const torch::Tensor& gathered) const {
  if (!gathered.defined() || gathered.numel() != world_size_ * shard_numel_) {
    throw std::invalid_argument(fmt::format("ShardLayout::unshard: expected {} ranks x {} elements, got {}",
                                            world_size_, shard_numel_, gathered.defined() ? gathered.numel() : 0));
  }
  torch::NoGradGuard no_grad;
  // Row r of `by_rank` is rank r's shard; column block b of it, read row after row, is bucket b.
  const auto by_rank = gathered.reshape({world_size_, shard_numel_});
  std::vector<torch::Tensor> out(numels_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const auto bucket = by_rank.narrow(1, chunk_offset_[b], chunk_numel_[b]).reshape(-1);  // a copy: one per bucket
    for (auto p : buckets_[b]) out[p] = bucket.narrow(0, offset_in_bucket_[p], numels_[p]);
  }
  return out;
}

}  // namespace colo::zero
