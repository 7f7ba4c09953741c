#pragma once

#include <colo/ddp/bucketed_all_reduce.h>
#include <colo/zero/grad_reducer.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::zero {

class ShardLayout;

// ZeRO stage 1 gradients: a ddp::BucketedAllReduce whose buckets are the layout's (gradients
// are views into them, averaged during backward, overlapped with it), so that every rank holds
// the whole averaged gradient after backward; finalize() copies this rank's chunk of each
// bucket into the gradient shard (cast to fp32; to the CPU under offload, through pinned memory).
class AllReduceGradReducer : public GradReducer {
 public:
  // `named_params`: the layout's parameters in its order, requiring grad, with their final
  // device and dtype. `grad_shard`: the flat fp32 tensor finalize() writes (ShardedAdam::grad()).
  // `options.bucket_cap_mb` must be the cap the layout's buckets were assigned with: throws
  // std::logic_error when the all-reduce groups the parameters otherwise.
  AllReduceGradReducer(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                       std::shared_ptr<dist::ProcessGroup> group, std::shared_ptr<const ShardLayout> layout,
                       torch::Tensor grad_shard, ddp::BucketedAllReduceOptions options);

  void finalize() override;
  void zero_grad() override { all_reduce_.zero_grad(); }
  void set_sync(bool enabled) override { all_reduce_.set_sync(enabled); }
  bool sync_enabled() const override { return all_reduce_.sync_enabled(); }
  void reduce_accumulated() override { all_reduce_.reduce_accumulated(); }
  void prepare_for_backward() override { all_reduce_.prepare_for_backward(); }
  int64_t synchronized_passes() const override { return all_reduce_.synchronized_passes(); }

 private:
  std::shared_ptr<const ShardLayout> layout_;
  torch::Tensor grad_shard_;
  int rank_;
  ddp::BucketedAllReduce all_reduce_;
};

}  // namespace colo::zero
