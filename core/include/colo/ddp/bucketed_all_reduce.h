#pragma once

#include <colo/ddp/grad_bucket_scheduler.h>
#include <colo/dist/process_group.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colo::ddp {

struct BucketedAllReduceOptions {
  // Gradients per bucket, in MiB (PyTorch DDP's default). Smaller buckets start communication
  // earlier in backward; larger ones cost fewer collective launches.
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  // After backward, param.grad IS a view into its bucket: no copy out, and between steps the
  // gradients take no memory beyond the buckets. Off, param.grad stays a tensor of its own and
  // the averages are copied back into it (one batched copy).
  TORCH_ARG(bool, gradient_as_bucket_view) = true;
  // Tolerate parameters that get no gradient in a backward pass (a layer skipped in forward):
  // their buckets are launched at the end of backward. Off, such a pass is an error naming the
  // parameters, because the ranks would otherwise wait forever for a bucket that never fills.
  // Without bucket views it costs one more small all-reduce and a host synchronisation per
  // pass (to learn which parameters no rank used, whose gradients then stay undefined).
  TORCH_ARG(bool, find_unused_parameters) = false;
  // Launch each bucket's all-reduce as soon as its gradients are in, overlapping backward. Off,
  // every bucket is launched at the end of backward.
  TORCH_ARG(bool, overlap_communication) = true;
  // The dtype buckets are reduced in (e.g. fp32 for bf16 gradients, for a more accurate sum);
  // unset: the gradients' own. Buckets of another dtype travel through a copy in this one.
  TORCH_ARG(std::optional<c10::ScalarType>, communication_dtype) = std::nullopt;
};

// Data-parallel gradient synchronisation: after each backward pass, every parameter's gradient
// is the AVERAGE of its gradients over the ranks of `group`, with the communication overlapped
// with backward (what torch.nn.parallel.DistributedDataParallel's Reducer does; c10d's own
// Reducer is not usable from C++ with Debian's headers).
//
// How:
//   - Parameters are grouped into per-dtype flat buckets by assign_buckets(): reverse
//     registration order, about bucket_cap_mb each.
//   - A GradBucketScheduler (the hooks on the gradient accumulators) says when a bucket's
//     gradients are all in: they are then moved into the bucket in one batched copy (autograd
//     cannot write into a given buffer, and one copy per parameter is ~150 launch-bound kernels
//     for a ViT-B) and the bucket is all-reduced asynchronously, buckets launched in the same
//     order on every rank.
//   - At the end of backward, what is left is launched (only parameters without gradient: an
//     error unless find_unused_parameters), every bucket is waited for and, without bucket
//     views, the averages are copied back into param.grad.
// Hooks do constant work, launch no per-parameter collectives and never synchronise with the
// device; with NCCL, waiting only orders the current stream after the all-reduce. (Gloo, which
// cannot reduce bf16 in LibTorch 1.13, reduces bf16 buckets through fp32 copies, whatever
// communication_dtype says.)
//
// Gradient accumulation: with set_sync(false), hooks do nothing and gradients accumulate
// locally; the next synchronised backward reduces the accumulated sum.
//
// The parameters must already have their final device and dtype: LibTorch drops a tensor's
// gradient accumulator (and so these hooks) when set_data() changes either. Between steps, set
// the gradients to undefined (zero_grad() here, or an optimizer's set-to-none): autograd then
// hands over its fresh gradients instead of adding them into zeroed ones. Gradients zeroed in
// place (bucket views included) work too, at the cost of that add.
//
// Not supported: reentrant activation checkpointing inside the model (its inner backward
// passes would run the end-of-backward callback early).
class BucketedAllReduce {
 public:
  // `named_params`: the model's parameters in registration order, with names for error
  // messages; those not requiring grad are left out.
  // Throws std::invalid_argument for a non-positive bucket size or a sparse parameter.
  BucketedAllReduce(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                    std::shared_ptr<dist::ProcessGroup> group, BucketedAllReduceOptions options = {});
  // Removes the hooks. A backward pass must not be running.
  ~BucketedAllReduce();
  BucketedAllReduce(const BucketedAllReduce&) = delete;
  BucketedAllReduce& operator=(const BucketedAllReduce&) = delete;

  // Off: backward passes accumulate gradients locally without communicating (no_sync).
  void set_sync(bool enabled) { scheduler_->set_sync(enabled); }
  bool sync_enabled() const { return scheduler_->sync_enabled(); }
  // Averages, now, the gradients accumulated with sync off (GradBucketScheduler::reduce_accumulated).
  void reduce_accumulated() { scheduler_->reduce_accumulated(); }

  // Sets every gradient to undefined (what the next backward handles fastest). Not during backward.
  void zero_grad();

  // Call before each forward (the plugin's model wrapper does): discards the state of a
  // backward pass that failed midway (an exception inside autograd), which would otherwise
  // keep the next pass from synchronising. Cheap when there is nothing to discard.
  void prepare_for_backward() { scheduler_->prepare_for_backward(); }

  const BucketedAllReduceOptions& options() const { return options_; }
  const dist::ProcessGroup& group() const { return *group_; }
  // The reduced parameters (requires_grad ones, registration order) and their names.
  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<std::string>& param_names() const { return names_; }
  // Per bucket, indices into params(), in launch order.
  const std::vector<std::vector<std::size_t>>& bucket_assignment() const { return assignment_; }
  std::size_t num_buckets() const { return assignment_.size(); }
  // The flat buffer that bucket b all-reduces.
  const torch::Tensor& bucket_buffer(std::size_t b) const { return buckets_.at(b).buffer; }
  // Backward passes whose gradients were synchronised so far.
  int64_t synchronized_passes() const { return scheduler_->synchronized_passes(); }

 private:
  struct Bucket {
    torch::Tensor buffer;             // flat, one dtype and device
    torch::Tensor staging;            // the copy reduced where it travels in another dtype
    std::vector<std::size_t> params;  // indices into params_
    dist::Work work;
  };

  // Starts bucket b's all-reduce (scheduler callback).
  void launch(std::size_t b);
  // End of a synchronised backward pass (scheduler callback).
  void finish_backward(const std::vector<std::size_t>& missing);
  // Moves bucket b's gradients into its buffer (one batched copy; zeros for parameters without
  // a gradient) and, with bucket views, makes each param.grad its slot.
  void gather(std::size_t b);
  // Copies the reduced buckets back into param.grad (no bucket views; one batched copy),
  // honouring globally unused parameters.
  void bucket_to_gradients(const std::vector<bool>& used_anywhere);

  BucketedAllReduceOptions options_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> slots_;  // param i's slice of its bucket, shaped like param i
  std::vector<std::vector<std::size_t>> assignment_;
  std::vector<Bucket> buckets_;
  // Last: destroyed first, so that its hooks are gone before what they use.
  std::unique_ptr<GradBucketScheduler> scheduler_;
};

}  // namespace colo::ddp
