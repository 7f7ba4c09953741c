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
  for (auto& d : destinations_) d.zero_();
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
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
  // The output lives from launch to the end of the pass only: between passes no bucket holds memory.
  bucket.output = torch::empty({layout_->chunk_numel(b)}, travel_options_);
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
    bucket.output.copy_(input);
    if (after_launch_) after_launch_(b);
    return;
  }
  bucket.work = group_->reduce_scatter(bucket.output, input, dist::ReduceOp::kAvg);
  if (after_launch_) after_launch_(b);
}

void ReduceScatterGradReducer::finish_backward(const std::vector<std::size_t>& missing) {
  torch::NoGradGuard no_grad;
  try {
    if (!missing.empty()) {
      // Complete what was launched so that no collective is left half-matched, then fail.
      for (std::size_t b = 0; b < scheduler_->launched(); ++b) buckets_[b].work.wait();
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
    const auto reduced = [this](std::size_t b) {
      buckets_[b].work.wait();
      const auto& output = buckets_[b].output;
      return travel_dtype_ == communication_dtype_ ? output : output.to(communication_dtype_);
    };
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      auto& destination = destinations_[b];
      const auto chunk = reduced(b);
      if (destination.device() == chunk.device()) {
        destination.add_(chunk);
      } else {
        if (!host_staging_.defined() || host_staging_.numel() < chunk.numel()) {
          host_staging_ = torch::empty({chunk.numel()}, torch::TensorOptions(torch::kCPU)
                                                            .dtype(communication_dtype_)
                                                            .pinned_memory(pin_memory_ && chunk.is_cuda()));
        }
        auto staging = host_staging_.narrow(0, 0, chunk.numel());
        staging.copy_(chunk, /*non_blocking=*/true);
        if (staging.is_pinned()) torch::cuda::synchronize();
        destination.add_(staging);
      }
    }
  } catch (...) {
    for (auto& bucket : buckets_) {
      bucket.work = dist::Work();
      for (auto& g : bucket.grads) g = torch::Tensor();
    }
    throw;
  }
  for (auto& bucket : buckets_) {
    bucket.work = dist::Work();
    bucket.output = torch::Tensor();
  }
}

}  // namespace colo::zero
