#include <ATen/CPUGeneratorImpl.h>
#include <colo/data/distributed_sampler.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <numeric>
#include <stdexcept>

namespace colo::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (dataset_size < 1) {
    throw std::invalid_argument(fmt::format("DistributedSampler: the data set is empty (size {})", dataset_size));
  }
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument(
        fmt::format("DistributedSampler: rank {} of {} replicas: num_replicas must be positive and the rank in [0, {}) "
                    "(both are the data-parallel size and rank)",
                    rank, num_replicas, num_replicas));
  }
  if (drop_last && dataset_size < num_replicas) {
    throw std::invalid_argument(fmt::format(
        "DistributedSampler: with drop_last, {} samples leave nothing for each of {} replicas; turn drop_last off "
        "(samples are then repeated) or use fewer data-parallel replicas",
        dataset_size, num_replicas));
  }
  // PyTorch's arithmetic: floor(n / R) per replica when dropping the tail, ceil(n / R) when padding.
  num_samples_ = drop_last ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  if (epoch < 0) throw std::invalid_argument(fmt::format("DistributedSampler: negative epoch {}", epoch));
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  if (shuffle_) {
    // torch.randperm from a CPU generator seeded with seed + epoch, as PyTorch's sampler draws it.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
    const auto permutation = torch::randperm(dataset_size_, generator, torch::kLong);
    const auto* data = permutation.data_ptr<int64_t>();
    order.assign(data, data + dataset_size_);
  } else {
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(num_samples_));
  // Position p of the padded order is order[p mod n]: wrapping around as often as needed.
  for (int64_t position = rank_; position < total_size(); position += num_replicas_) {
    shard.push_back(order[static_cast<size_t>(position % dataset_size_)]);
  }
  return shard;
}

}  // namespace colo::data
