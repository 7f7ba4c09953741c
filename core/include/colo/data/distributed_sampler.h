#pragma once

#include <cstdint>
#include <vector>

namespace colo::data {

// Splits a data set's indices over data-parallel replicas, exactly as PyTorch's
// torch.utils.data.DistributedSampler does (same permutation for the same seed and epoch, same
// padding, same shards), so a colo run and a PyTorch run see the same samples in the same order.
//
// num_replicas and rank are the DATA-PARALLEL size and rank, not the world's: ranks that hold
// different tensor- or pipeline-parallel parts of one model replica must see the same data, so
// they pass the same dp rank (ProcessGroupMesh's dp axis).
//
// Each epoch permutes 0..n-1 (randperm from a generator seeded with seed + epoch; the identity
// when shuffle is off), the same on every rank. Without drop_last, the permutation is padded by
// wrapping around to ceil(n / R) · R indices so every replica gets the same count; with it, the
// n mod R indices at the end are dropped. Replica r takes positions r, r + R, r + 2R, …: the
// shards are disjoint up to the padding and together cover the (padded or cut) permutation.
// Because the shards interleave, batch k of every replica together holds exactly positions
// [k·B·R, (k+1)·B·R) of the permutation: single-process batch k at batch size B·R.
class DistributedSampler {
 public:
  // Throws std::invalid_argument for an empty data set, num_replicas < 1, a rank outside
  // [0, num_replicas), or drop_last with fewer samples than replicas.
  DistributedSampler(int64_t dataset_size, int64_t num_replicas = 1, int64_t rank = 0, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // Selects the permutation of an epoch; call it before each epoch, or every epoch repeats the
  // order of epoch 0. Throws std::invalid_argument for a negative epoch.
  void set_epoch(int64_t epoch);

  // This replica's indices for the current epoch, num_samples() of them.
  std::vector<int64_t> indices() const;

  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }                 // per replica
  int64_t total_size() const { return num_samples_ * num_replicas_; }  // over all replicas
  int64_t dataset_size() const { return dataset_size_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  bool drop_last() const { return drop_last_; }

 private:
  int64_t dataset_size_;
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace colo::data
