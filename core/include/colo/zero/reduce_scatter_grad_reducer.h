#pragma once

#include <colo/ddp/grad_bucket_scheduler.h>
#include <colo/dist/process_group.h>
#include <colo/zero/grad_reducer.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colo::zero {

class ShardLayout;

struct ReduceScatterGradReducerOptions {
  // Launch each bucket's reduce-scatter as soon as its gradients are in, overlapping backward.
  // Off, every bucket is launched at the end of backward.
  TORCH_ARG(bool, overlap_communication) = true;
  // The dtype buckets are reduced in, and so the precision of the reduced gradients; unset: the
  // gradients' own. (Gloo cannot reduce bf16 in LibTorch 1.13: there bf16 buckets travel as fp32
  // copies and the result is rounded to bf16, as NCCL would deliver it.)
  TORCH_ARG(std::optional<c10::ScalarType>, communication_dtype) = std::nullopt;
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
//   end of backward: wait, then add each rank's chunk into the gradient shard (to the CPU under
//       offload: copies into pinned memory, one device synchronisation, one add)
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
  ~ReduceScatterGradReducer() override;

  // Nothing to do: every synchronised pass has added its chunks already.
  void finalize() override {}
  void zero_grad() override;
  void set_sync(bool enabled) override { scheduler_->set_sync(enabled); }
  bool sync_enabled() const override { return scheduler_->sync_enabled(); }
  void reduce_accumulated() override { scheduler_->reduce_accumulated(); }
  void prepare_for_backward() override { scheduler_->prepare_for_backward(); }
  int64_t synchronized_passes() const override { return scheduler_->synchronized_passes(); }

  c10::ScalarType communication_dtype() const { return communication_dtype_; }

 private:
  struct Bucket {
    std::vector<torch::Tensor> grads;  // flattened, in the bucket's parameter order, until launch
    torch::Tensor output;              // this rank's chunk of the reduction, in the travel dtype
    dist::Work work;
  };

  void take_gradient(std::size_t i);
  void launch(std::size_t b);
  void finish_backward(const std::vector<std::size_t>& missing);

  std::shared_ptr<dist::ProcessGroup> group_;
  std::shared_ptr<const ShardLayout> layout_;
  torch::Tensor grad_shard_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  c10::ScalarType communication_dtype_;
  c10::ScalarType travel_dtype_;  // communication_dtype_, or fp32 where the backend cannot reduce it
  std::vector<std::size_t> position_in_bucket_;
  std::vector<Bucket> buckets_;
  torch::Tensor host_staging_;  // pinned, when the shard is on the CPU and the gradients on a GPU
  // Last: destroyed first, so that its hooks are gone before what they use.
  std::unique_ptr<ddp::GradBucketScheduler> scheduler_;
};

}  // namespace colo::zero
