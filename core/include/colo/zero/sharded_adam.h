#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colo::optim {
struct HybridAdamOptions;
}

namespace colo::zero {

class ShardLayout;

// This rank's part of a ZeRO optimizer: four flat fp32 tensors of layout.shard_numel()
// elements, element k of each belonging to the same element of the same parameter
// (ShardLayout::pieces):
//   master                 the fp32 master weights (the only fp32 copy of those weights anywhere)
//   grad                   their gradient, reduced over the data-parallel ranks
//   exp_avg, exp_avg_sq    Adam's moments
// and one step count: every parameter steps together.
//
// step() is Adam/AdamW (optim::HybridAdamOptions semantics, bias correction included) with each
// parameter's group hyper-parameters. Pieces of parameters of one group that lie next to each
// other form a RUN (padding joins the run before it: its gradient and weight are zero, so it
// stays zero); a model with one parameter group is one run, the whole shard:
//   CPU (offload, or the CPU build)    optim::adam_step_cpu per run: one vectorised,
//                                      multi-threaded pass (HybridAdam's CPU path)
//   CUDA                               one fused Adam kernel per group over its runs
//                                      (LibTorch >= 2.1); multi-tensor ops otherwise
class ShardedAdam {
 public:
  // When Adam's moments are allocated: with the rest, or at the first step (or
  // allocate_moments()), so that state which may still move (gemini's auto placement) does not
  // take its largest part where it will not stay.
  enum class Moments { kNow, kAtFirstStep };

  // `group_of_param[p]`: the parameter group of the layout's parameter p (groups 0, 1, …).
  // `options`: device and memory of the four tensors (the compute device, or CPU memory,
  // pinned when the compute device is a GPU, for offload); their dtype is always fp32.
  ShardedAdam(std::shared_ptr<const ShardLayout> layout, int rank, const std::vector<std::size_t>& group_of_param,
              torch::TensorOptions options, Moments moments = Moments::kNow);

  const ShardLayout& layout() const { return *layout_; }
  int rank() const { return rank_; }
  std::size_t num_groups() const { return num_groups_; }

  const torch::Tensor& master() const { return master_; }
  const torch::Tensor& grad() const { return grad_; }
  // Undefined until allocated (Moments::kAtFirstStep).
  const torch::Tensor& exp_avg() const { return exp_avg_; }
  const torch::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  // Allocates the moments (zeros) unless they are; step() does it first.
  void allocate_moments();
  // Bytes of the four tensors allocated now, and once all are (16 per shard element).
  int64_t held_bytes() const;
  int64_t full_bytes() const { return 16 * static_cast<int64_t>(master_.numel()); }

  // Updates applied so far (0 before the first). Settable for checkpoints (>= 0).
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps);

  // One Adam/AdamW update of the masters with grad(), as it is (unscale and clip it first),
  // group g with the hyper-parameters groups[g]. Throws std::invalid_argument when the number
  // of groups is smaller than the layout uses (a shard of a few groups may be stepped with all of them).
  void step(const std::vector<optim::HybridAdamOptions>& groups);

 private:
  struct Run {
    int64_t offset;
    int64_t numel;
    std::size_t group;
  };

  std::shared_ptr<const ShardLayout> layout_;
  int rank_;
  std::size_t num_groups_ = 0;
  std::string hint() const;

  std::vector<Run> runs_;
  torch::TensorOptions options_;
  torch::Tensor master_, grad_, exp_avg_, exp_avg_sq_;
  int64_t step_count_ = 0;
};

}  // namespace colo::zero
