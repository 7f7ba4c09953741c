#pragma once

#include <colo/dist/process_group.h>
#include <torch/types.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace colo::zero {

class PinnedStaging;
class ShardLayout;

// After a ZeRO step each rank holds the updated fp32 masters of its shard only; this brings them
// back into every rank's working weights. The working parameters are VIEWS into one flat buffer
// per bucket, in the compute dtype and laid out as the layout says (padded), so that each
// bucket's all-gather writes straight into the parameters: no unpacking.
//
// launch() rounds the master shard to the compute dtype (on the device; under offload on the
// CPU, then one copy to the device from pinned memory) and starts one asynchronous all-gather
// per bucket, last bucket first: buckets are in reverse layer order, so the first layers' weights
// arrive first. The model wrapper waits for a layer's buckets just before running the layer
// (wait(b)), so the gathers overlap the next forward; anything else that reads the weights must
// wait_all() first. With NCCL a wait only orders the compute stream after the gather.
// Gloo gathers the buffers as raw bytes (an exact copy, for any dtype, bf16 included).
class BucketedAllGather {
 public:
  // Casts `params` (the layout's parameters, in its order, all on one device) to
  // `working_dtype`, and re-points them (set_data: the same tensor objects, so that modules and
  // optimizers holding them see the change) at their places in the bucket buffers, keeping
  // their values. Gradient hooks must be attached afterwards: set_data drops a tensor's
  // gradient accumulator when it changes the dtype.
  BucketedAllGather(std::vector<torch::Tensor> params, std::shared_ptr<const ShardLayout> layout,
                    std::shared_ptr<dist::ProcessGroup> group, c10::ScalarType working_dtype);
  ~BucketedAllGather();
  BucketedAllGather(const BucketedAllGather&) = delete;
  BucketedAllGather& operator=(const BucketedAllGather&) = delete;

  // Starts gathering every rank's `master_shard` (fp32, this rank's shard, on the device or the
  // CPU) into the working weights. Waits for a gather still in flight first.
  void launch(const torch::Tensor& master_shard);
  // Waits for bucket b's gather; nothing when none is in flight.
  void wait(std::size_t bucket);
  void wait_all();
  bool in_flight() const { return in_flight_; }

  c10::ScalarType working_dtype() const { return working_dtype_; }
  const torch::Tensor& bucket_buffer(std::size_t bucket) const { return buffers_.at(bucket); }

 private:
  std::shared_ptr<const ShardLayout> layout_;
  std::shared_ptr<dist::ProcessGroup> group_;
  c10::ScalarType working_dtype_;
  int rank_;
  std::vector<torch::Tensor> buffers_;  // per bucket, padded_bucket_numel elements
  torch::Tensor working_shard_;         // this rank's shard in the compute dtype, on the device
  std::unique_ptr<PinnedStaging> uploads_;  // offload: rounded master buckets on their way to the device
  std::vector<dist::Work> works_;
  std::vector<bool> pending_;
  bool in_flight_ = false;
};

}  // namespace colo::zero
