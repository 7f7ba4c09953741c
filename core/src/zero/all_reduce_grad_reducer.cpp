#include <colo/dist/process_group.h>
#include <colo/zero/all_reduce_grad_reducer.h>
#include <colo/zero/shard_layout.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <stdexcept>

namespace colo::zero {

AllReduceGradReducer::AllReduceGradReducer(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                                           std::shared_ptr<dist::ProcessGroup> group,
                                           std::shared_ptr<const ShardLayout> layout, torch::Tensor grad_shard,
                                           ddp::BucketedAllReduceOptions options)
    : layout_(std::move(layout)),
      grad_shard_(std::move(grad_shard)),
      rank_(group ? group->rank() : 0),
      all_reduce_(std::move(named_params), std::move(group), options.gradient_as_bucket_view(true)) {
  if (!layout_) throw std::invalid_argument("AllReduceGradReducer: the layout is null");
  std::vector<std::vector<std::size_t>> expected;
  for (std::size_t b = 0; b < layout_->num_buckets(); ++b) expected.push_back(layout_->bucket_params(b));
  if (all_reduce_.params().size() != layout_->num_params() || all_reduce_.bucket_assignment() != expected) {
    throw std::logic_error(
        "AllReduceGradReducer: the all-reduce's buckets differ from the shard layout's; build the layout with "
        "ddp::assign_buckets over the same parameters (all requiring grad, final dtype) and the same bucket cap");
  }
}

void AllReduceGradReducer::finalize() {
  torch::NoGradGuard no_grad;
  bool to_host = false;
  for (std::size_t b = 0; b < layout_->num_buckets(); ++b) {
    const auto valid = layout_->valid_chunk_numel(b, rank_);
    if (valid == 0) continue;
    const auto& bucket = all_reduce_.bucket_buffer(b);
    to_host = to_host || (bucket.is_cuda() && grad_shard_.is_cpu());
    grad_shard_.narrow(0, layout_->chunk_offset(b), valid)
        .copy_(bucket.narrow(0, rank_ * layout_->chunk_numel(b), valid), /*non_blocking=*/true);
  }
  // Copies into pinned host memory return before they are done.
  if (to_host) torch::cuda::synchronize();
}

}  // namespace colo::zero
