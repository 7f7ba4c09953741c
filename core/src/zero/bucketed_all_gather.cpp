#include <colo/zero/bucketed_all_gather.h>
#include <colo/zero/allocate.h>
#include <colo/zero/pinned_staging.h>
#include <colo/zero/shard_layout.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace colo::zero {

BucketedAllGather::BucketedAllGather(std::vector<torch::Tensor> params, std::shared_ptr<const ShardLayout> layout,
                                     std::shared_ptr<dist::ProcessGroup> group, c10::ScalarType working_dtype)
    : layout_(std::move(layout)), group_(std::move(group)), working_dtype_(working_dtype) {
  if (!group_) throw std::invalid_argument("BucketedAllGather: the process group is null");
  if (!layout_) throw std::invalid_argument("BucketedAllGather: the layout is null");
  if (params.size() != layout_->num_params() || layout_->world_size() != group_->size()) {
    throw std::invalid_argument(
        fmt::format("BucketedAllGather: {} parameters over {} ranks, but the layout is for {} parameters over {} ranks",
                    params.size(), group_->size(), layout_->num_params(), layout_->world_size()));
  }
  rank_ = group_->rank();
  const auto device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  const auto options = torch::TensorOptions(device).dtype(working_dtype_);
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < layout_->num_buckets(); ++b) {
    buffers_.push_back(torch::zeros({layout_->padded_bucket_numel(b)}, options));
    for (auto p : layout_->bucket_params(b)) {
      auto& param = params[p];
      if (param.numel() != layout_->param_numel(p) || param.device() != device) {
        throw std::invalid_argument(
            fmt::format("BucketedAllGather: parameter {} must have the layout's {} elements and be on {}", p,
                        layout_->param_numel(p), device.str()));
      }
      auto slot = buffers_.back().narrow(0, layout_->offset_in_bucket(p), param.numel()).view(param.sizes());
      slot.copy_(param.detach());
      param.set_data(slot);
    }
  }
  working_shard_ = torch::empty({layout_->shard_numel()}, options);
  works_.resize(layout_->num_buckets());
  pending_.assign(layout_->num_buckets(), false);
}

BucketedAllGather::~BucketedAllGather() = default;

void BucketedAllGather::launch(const torch::Tensor& master_shard) {
  wait_all();
  torch::NoGradGuard no_grad;
  if (master_shard.device() == working_shard_.device()) {
    working_shard_.copy_(master_shard);
  } else {
    // Offload: round on the CPU (half the bytes to move for bf16) into a pinned staging buffer
    // from a small pool, copied to the device on a copy stream while the CPU rounds the next
    // bucket (never a pinned copy of the whole shard).
    if (!uploads_) {
      int64_t largest = 0;
      for (std::size_t b = 0; b < layout_->num_buckets(); ++b) largest = std::max(largest, layout_->chunk_numel(b));
      uploads_ = std::make_unique<PinnedStaging>(
          working_shard_.device(),
          PinnedStagingOptions().slot_bytes(largest * static_cast<int64_t>(c10::elementSize(working_dtype_))).slots(4));
    }
    for (std::size_t b = 0; b < layout_->num_buckets(); ++b) {
      const auto source = master_shard.narrow(0, layout_->chunk_offset(b), layout_->chunk_numel(b));
      uploads_->upload(working_shard_.narrow(0, layout_->chunk_offset(b), layout_->chunk_numel(b)),
                       [&source](const torch::Tensor& host) { host.copy_(source); });
    }
    uploads_->finish();  // the gathers below read the working shard on the current stream
  }
  const bool as_bytes = group_->backend() == dist::Backend::kGloo;
  for (std::size_t b = layout_->num_buckets(); b-- > 0;) {
    auto input = working_shard_.narrow(0, layout_->chunk_offset(b), layout_->chunk_numel(b));
    if (group_->size() == 1) {
      buffers_[b].copy_(input);
      continue;
    }
    auto output = buffers_[b];
    if (as_bytes) {
      input = input.view(torch::kByte);
      output = output.view(torch::kByte);
    }
    works_[b] = group_->all_gather(output, input);
    pending_[b] = true;
  }
  in_flight_ = group_->size() > 1 && layout_->num_buckets() > 0;
}

void BucketedAllGather::wait(std::size_t bucket) {
  if (!pending_.at(bucket)) return;
  works_[bucket].wait();
  works_[bucket] = dist::Work();
  pending_[bucket] = false;
}

void BucketedAllGather::wait_all() {
  if (!in_flight_) return;
  for (std::size_t b = 0; b < works_.size(); ++b) wait(b);
  in_flight_ = false;
}

}  // namespace colo::zero
