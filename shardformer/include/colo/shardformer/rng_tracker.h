#pragma once

#include <colo/nn/region_rng.h>

#include <c10/core/Device.h>
#include <torch/types.h>

#include <cstdint>

namespace colo::shardformer {

// The random stream of the sharded regions of one tensor-parallel rank (Megatron's
// CudaRNGStatesTracker, for one region kind): its own CPU (and, on a GPU, CUDA) generator state,
// seeded with seed + 2718 + tp_rank so that every rank draws different masks there, swapped in
// for the default generator while a layer is inside the region and out again after. The default
// generator, which every rank seeds alike, is left exactly where it was, so dropout in replicated
// regions draws the same masks on every rank.
//
// Its state is not part of a checkpoint: a run with dropout inside sharded regions resumes with
// fresh masks there (the rest of the random state resumes exactly).
class RngTracker : public nn::RegionRng {
 public:
  RngTracker(uint64_t seed, int64_t tp_rank, c10::Device device);

  void enter() override;
  void exit() override;
  std::vector<torch::Tensor> save_state() const override;
  void restore_state(const std::vector<torch::Tensor>& state) override;

 private:
  c10::Device device_;
  torch::Tensor cpu_state_, cuda_state_;    // the region's, while outside it
  torch::Tensor saved_cpu_, saved_cuda_;    // the default generator's, while inside
  bool inside_ = false;
};

}  // namespace colo::shardformer
