#pragma once

#include <colo/ddp/grad_bucket_scheduler.h>
#include <colo/dist/process_group.h>
#include <colo/zero/grad_reducer.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colo::zero {

class PinnedStaging;
class ShardLayout;

struct ReduceScatterGradReducerOptions {
  // Launch each bucket's reduce-scatter as soon as its gradients are in, overlapping backward.
  // Off, every bucket is launched at the end of backward.
  TORCH_ARG(bool, overlap_communication) = true;
  // The dtype buckets are reduced in, and so the precision of the reduced gradients; unset: the
  // gradients' own. (Gloo cannot reduce bf16 in LibTorch 1.13: there bf16 buckets travel as fp32
  // copies and the result is rounded to bf16, as NCCL would deliver it.)
  TORCH_ARG(std::optional<c10::ScalarType>, communication_dtype) = std::nullopt;
  // Called on the autograd thread right after bucket b's reduce-scatter is launched: every
  // gradient of the bucket has been taken, so nothing of backward needs its parameters any more
  // (gemini releases the bucket's gathered chunk here).
  TORCH_ARG(std::function<void(std::size_t bucket)>, after_launch) = nullptr;
  // Host destinations of GPU gradients receive their chunks through a zero::PinnedStaging pool
  // of staging_slots buffers of one bucket's size (pinned unless pin_memory is off), copied on a
  // copy stream and added by a worker thread while backward goes on.
  TORCH_ARG(bool, pin_memory) = true;
  TORCH_ARG(int64_t, staging_slots) = 4;
};

// ZeRO stage 2 gradients: during backward each bucket of gradients is reduce-scattered (AVERAGE
// over the group), so that each rank receives only its chunk, which is added to the gradient
// shard (ShardedAdam::grad(), fp32) at the end of the pass. Per bucket and pass:
//
//   hook (ddp::GradBucketScheduler): param.grad is taken and param.grad set to undefined, so
//       that full-size gradients live only until their bucket is complete
//   bucket complete: one cat of its gradients into a flat buffer laid out as the layout says
//       (padded), launched as an asynchronous reduce-scatter and released by this class at
//       once (the backend keeps it alive while it needs it)
//   two buckets later (at once in a world of one): its chunk is added into its destination —
//       on the device, or, for a host destination (offload), copied through a pinned staging
//       pool on a copy stream and added by the pool's worker thread
//   end of backward: the remaining buckets likewise; the host additions are waited for
// After zero_grad() the next pass overwrites the destinations instead of adding to them.
//
// So param.grad is undefined after a synchronised backward pass. Under no_sync gradients
// accumulate in param.grad as usual (full size, in the compute dtype), and the next synchronised
// pass reduce-scatters their sum. Every parameter must receive a gradient in every
// synchronised pass (an error names those that did not): the ranks would otherwise wait forever
// for a bucket that never fills.
class ReduceScatterGradReducer : public GradReducer {
 public:
  // `named_params`: the layout's parameters in its order, requiring grad, with their final
  // device and dtype. `grad_shard`: the flat fp32 shard the chunks are added to.
  ReduceScatterGradReducer(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                           std::shared_ptr<dist::ProcessGroup> group, std::shared_ptr<const ShardLayout> layout,
                           torch::Tensor grad_shard, ReduceScatterGradReducerOptions options = {});
  // The same with one destination per bucket (chunk_numel(b) fp32 elements each, on the device or
  // in host memory, possibly different per bucket): gemini's per-chunk gradient shards.
  ReduceScatterGradReducer(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                           std::shared_ptr<dist::ProcessGroup> group, std::shared_ptr<const ShardLayout> layout,
                           std::vector<torch::Tensor> bucket_grads, ReduceScatterGradReducerOptions options = {});
  ~ReduceScatterGradReducer() override;

  // Zeroes the destinations no pass reached since zero_grad() (the passes themselves completed
  // every chunk before backward returned).
  void finalize() override;
  void zero_grad() override;
  void set_sync(bool enabled) override { scheduler_->set_sync(enabled); }
  bool sync_enabled() const override { return scheduler_->sync_enabled(); }
  void reduce_accumulated() override { scheduler_->reduce_accumulated(); }
  void prepare_for_backward() override { scheduler_->prepare_for_backward(); }
  int64_t synchronized_passes() const override { return scheduler_->synchronized_passes(); }

  c10::ScalarType communication_dtype() const { return communication_dtype_; }
  // Host memory of the staging pool (pinned under offload), allocated as transfers needed it.
  int64_t staging_bytes() const;
  // Bucket b's chunks go to `grad` from now on (gemini's auto placement moving a chunk's state
  // between the device and host memory). Not during a backward pass.
  void set_destination(std::size_t bucket, torch::Tensor grad);

 private:
  struct Bucket {
    std::vector<torch::Tensor> grads;  // flattened, in the bucket's parameter order, until launch
    torch::Tensor output;              // this rank's chunk of the reduction, in the travel dtype
    dist::Work work;
  };

  void check_destination(std::size_t bucket, const torch::Tensor& grad) const;
  void take_gradient(std::size_t i);
  void launch(std::size_t b);
  void complete(std::size_t b);
  void finish_backward(const std::vector<std::size_t>& missing);

  static constexpr std::size_t kCompletionLag = 2;

  std::shared_ptr<dist::ProcessGroup> group_;
  std::shared_ptr<const ShardLayout> layout_;
  std::vector<torch::Tensor> destinations_;  // per bucket: where its chunk of the reduction is added
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  c10::ScalarType communication_dtype_;
  c10::ScalarType travel_dtype_;  // communication_dtype_, or fp32 where the backend cannot reduce it
  torch::TensorOptions travel_options_;
  std::vector<std::size_t> position_in_bucket_;
  std::vector<Bucket> buckets_;
  std::function<void(std::size_t)> after_launch_;
  bool pin_memory_ = true;
  int64_t staging_slots_ = 4;
  std::vector<bool> fresh_;            // per bucket: nothing added since zero_grad(); overwrite
  std::deque<std::size_t> in_flight_;  // launched, not yet completed, in launch order
  std::unique_ptr<PinnedStaging> staging_;
  // Last: destroyed first, so that its hooks are gone before what they use.
  std::unique_ptr<ddp::GradBucketScheduler> scheduler_;
};

}  // namespace colo::zero
