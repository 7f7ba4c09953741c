#include <colo/zero/pinned_staging.h>
#include <colo/zero/reduce_scatter_grad_reducer.h>
#include <colo/zero/shard_layout.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "../ddp/gloo_staging.h"

namespace colo::zero {

namespace {

std::vector<torch::Tensor> bucket_views(const ShardLayout* layout, const torch::Tensor& grad_shard) {
  if (!layout) throw std::invalid_argument("ReduceScatterGradReducer: the layout is null");
  if (!grad_shard.defined() || grad_shard.numel() != layout->shard_numel() || grad_shard.scalar_type() != torch::kFloat) {
    throw std::invalid_argument(fmt::format(
        "ReduceScatterGradReducer: the gradient shard must be a flat fp32 tensor of {} elements", layout->shard_numel()));
  }
  std::vector<torch::Tensor> views;
  for (std::size_t b = 0; b < layout->num_buckets(); ++b) {
    views.push_back(grad_shard.narrow(0, layout->chunk_offset(b), layout->chunk_numel(b)));
  }
  return views;
}

}  // namespace

ReduceScatterGradReducer::ReduceScatterGradReducer(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                                                   std::shared_ptr<dist::ProcessGroup> group,
                                                   std::shared_ptr<const ShardLayout> layout, torch::Tensor grad_shard,
                                                   ReduceScatterGradReducerOptions options)
    : ReduceScatterGradReducer(std::move(named_params), std::move(group), layout, bucket_views(layout.get(), grad_shard),
                               std::move(options)) {}

ReduceScatterGradReducer::ReduceScatterGradReducer(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                                                   std::shared_ptr<dist::ProcessGroup> group,
                                                   std::shared_ptr<const ShardLayout> layout,
                                                   std::vector<torch::Tensor> bucket_grads,
                                                   ReduceScatterGradReducerOptions options)
    : group_(std::move(group)),
      layout_(std::move(layout)),
      destinations_(std::move(bucket_grads)),
      after_launch_(options.after_launch()) {
  if (!group_) throw std::invalid_argument("ReduceScatterGradReducer: the process group is null");
  if (!layout_) throw std::invalid_argument("ReduceScatterGradReducer: the layout is null");
  if (named_params.size() != layout_->num_params() || layout_->world_size() != group_->size()) {
    throw std::invalid_argument(fmt::format(
        "ReduceScatterGradReducer: {} parameters over {} ranks, but the layout is for {} parameters over {} ranks",
        named_params.size(), group_->size(), layout_->num_params(), layout_->world_size()));
  }
  if (destinations_.size() != layout_->num_buckets()) {
    throw std::invalid_argument("ReduceScatterGradReducer: one gradient destination per bucket");
  }
  for (std::size_t b = 0; b < destinations_.size(); ++b) check_destination(b, destinations_[b]);
  for (std::size_t i = 0; i < named_params.size(); ++i) {
    auto& [name, param] = named_params[i];
    if (!param.defined() || !param.requires_grad() || param.numel() != layout_->param_numel(i)) {
      throw std::invalid_argument(
          fmt::format("ReduceScatterGradReducer: parameter '{}' must require grad and have the layout's {} elements",
                      name, layout_->param_numel(i)));
    }
    names_.push_back(std::move(name));
    params_.push_back(param);
  }
  const auto device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().device();
  communication_dtype_ =
      options.communication_dtype().value_or(params_.empty() ? torch::kFloat : params_.front().scalar_type());
  travel_dtype_ = ddp::detail::stage_in_fp32(*group_, communication_dtype_) ? torch::kFloat : communication_dtype_;

  travel_options_ = torch::TensorOptions(device).dtype(travel_dtype_);
  position_in_bucket_.resize(params_.size());
  buckets_.resize(layout_->num_buckets());
  std::vector<std::vector<std::size_t>> assignment;
  for (std::size_t b = 0; b < layout_->num_buckets(); ++b) {
    const auto& members = layout_->bucket_params(b);
    for (std::size_t k = 0; k < members.size(); ++k) position_in_bucket_[members[k]] = k;
    buckets_[b].grads.resize(members.size());
    assignment.push_back(members);
  }
  pin_memory_ = options.pin_memory();
  staging_slots_ = options.staging_slots();
  fresh_.assign(destinations_.size(), false);
  ddp::GradBucketCallbacks callbacks;
  callbacks.grad_ready = [this](std::size_t i) { take_gradient(i); };
  callbacks.launch = [this](std::size_t b) { launch(b); };
  callbacks.finish = [this](const std::vector<std::size_t>& missing) { finish_backward(missing); };
  scheduler_ = std::make_unique<ddp::GradBucketScheduler>(params_, names_, std::move(assignment), std::move(callbacks),
                                                          options.overlap_communication());
}

ReduceScatterGradReducer::~ReduceScatterGradReducer() = default;

void ReduceScatterGradReducer::check_destination(std::size_t b, const torch::Tensor& d) const {
  if (!d.defined() || d.numel() != layout_->chunk_numel(b) || d.scalar_type() != torch::kFloat) {
    throw std::invalid_argument(fmt::format(
        "ReduceScatterGradReducer: bucket {}'s gradient destination must be an fp32 tensor of {} elements", b,
        layout_->chunk_numel(b)));
  }
}

void ReduceScatterGradReducer::set_destination(std::size_t bucket, torch::Tensor grad) {
  check_destination(bucket, grad);
  destinations_.at(bucket) = std::move(grad);
}

void ReduceScatterGradReducer::zero_grad() {
  torch::NoGradGuard no_grad;
  // The destinations are overwritten by the next pass instead of zeroed now (a full pass over
  // what may be gigabytes of host memory); finalize() zeroes those no pass reached.
  std::fill(fresh_.begin(), fresh_.end(), true);
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

void ReduceScatterGradReducer::finalize() {
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < destinations_.size(); ++b) {
    if (fresh_[b]) destinations_[b].zero_();
    fresh_[b] = false;
  }
}

void ReduceScatterGradReducer::take_gradient(std::size_t i) {
  torch::NoGradGuard no_grad;
  auto& grad = params_[i].mutable_grad();
  buckets_[layout_->bucket_of(i)].grads[position_in_bucket_[i]] = grad.reshape(-1);
  grad = torch::Tensor();
}

void ReduceScatterGradReducer::launch(std::size_t b) {
  torch::NoGradGuard no_grad;
  auto& bucket = buckets_[b];
  const auto numel = layout_->bucket_numel(b);
  const auto padded = layout_->padded_bucket_numel(b);
  auto input = torch::empty({padded}, travel_options_);
  auto body = input.narrow(0, 0, numel);
  bool same_dtype = true;
  for (const auto& g : bucket.grads) same_dtype = same_dtype && g.scalar_type() == travel_dtype_;
  if (same_dtype) {
    at::cat_out(body, bucket.grads, 0);
  } else {
    body.copy_(torch::cat(bucket.grads));
  }
  if (padded > numel) input.narrow(0, numel, padded - numel).zero_();
  for (auto& g : bucket.grads) g = torch::Tensor();
  if (group_->size() == 1) {
    bucket.output = input;  // the whole bucket is this rank's chunk
  } else {
    // The output lives from launch to the bucket's completion only.
    bucket.output = torch::empty({layout_->chunk_numel(b)}, travel_options_);
    bucket.work = group_->reduce_scatter(bucket.output, input, dist::ReduceOp::kAvg);
  }
  in_flight_.push_back(b);
  if (after_launch_) after_launch_(b);
  // Complete the buckets launched a few before this one: by now their collectives are done (or
  // nearly), and their outputs should not pile up until the end of backward.
  const std::size_t lag = group_->size() == 1 ? 0 : kCompletionLag;
  while (in_flight_.size() > lag) {
    const auto oldest = in_flight_.front();
    in_flight_.pop_front();
    complete(oldest);
  }
}

// Bucket b's chunk of the reduction goes into its destination: added on the device, or, for a
// host destination of GPU gradients, copied to host memory on a copy stream through a pinned
// staging buffer and added there by the staging's worker thread while backward goes on.
void ReduceScatterGradReducer::complete(std::size_t b) {
  auto& bucket = buckets_[b];
  bucket.work.wait();
  bucket.work = dist::Work();
  auto chunk = travel_dtype_ == communication_dtype_ ? bucket.output : bucket.output.to(communication_dtype_);
  bucket.output = torch::Tensor();
  auto destination = destinations_[b];
  const bool fresh = fresh_[b];
  fresh_[b] = false;
  const auto add = [destination, fresh](const torch::Tensor& values) {
    if (fresh) {
      destination.copy_(values);
    } else {
      destination.add_(values);
    }
  };
  if (destination.device() == chunk.device()) {
    add(chunk);
    return;
  }
  if (!staging_) {
    int64_t largest = 0;
    for (std::size_t k = 0; k < layout_->num_buckets(); ++k) largest = std::max(largest, layout_->chunk_numel(k));
    staging_ = std::make_unique<PinnedStaging>(
        chunk.device(), PinnedStagingOptions()
                            .slot_bytes(largest * static_cast<int64_t>(c10::elementSize(communication_dtype_)))
                            .slots(staging_slots_)
                            .pin_memory(pin_memory_));
  }
  staging_->download(chunk, add);
}

void ReduceScatterGradReducer::finish_backward(const std::vector<std::size_t>& missing) {
  torch::NoGradGuard no_grad;
  try {
    if (!missing.empty()) {
      // Complete what was launched so that no collective is left half-matched, then fail.
      for (auto b : in_flight_) buckets_[b].work.wait();
      std::vector<std::string> names;
      for (auto i : missing) names.push_back(names_[i]);
      throw std::runtime_error(fmt::format(
          "ZeRO gradient reduce-scatter over {}: {} parameter(s) received no gradient in this backward pass: [{}]. "
          "ZeRO needs a gradient for every trainable parameter in every synchronised backward pass, or the ranks "
          "cannot synchronise; set requires_grad=false on parameters that do not contribute to the loss, or leave "
          "them out of the optimizer.",
          group_->describe(), missing.size(), fmt::join(names, ", ")));
    }
    scheduler_->launch_remaining();
    while (!in_flight_.empty()) {
      const auto b = in_flight_.front();
      in_flight_.pop_front();
      complete(b);
    }
    if (staging_) staging_->finish();
  } catch (...) {
    for (auto& bucket : buckets_) {
      bucket.work = dist::Work();
      bucket.output = torch::Tensor();
      for (auto& g : bucket.grads) g = torch::Tensor();
    }
    in_flight_.clear();
    if (staging_) {
      try {
        staging_->finish();
      } catch (...) {  // the first failure is the one reported
      }
    }
    throw;
  }
}

int64_t ReduceScatterGradReducer::staging_bytes() const { return staging_ ? staging_->staging_bytes() : 0; }

}  // namespace colo::zero
