#include <colo/compat/torch_compat.h>
#include <colo/ddp/bucket_assignment.h>
#include <colo/ddp/bucketed_all_reduce.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gloo_staging.h"

namespace colo::ddp {

struct BucketedAllReduce::Hooks {
  std::vector<compat::GradAccumulatedHook> handles;
};

BucketedAllReduce::BucketedAllReduce(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                                     std::shared_ptr<dist::ProcessGroup> group, BucketedAllReduceOptions options)
    : options_(options), group_(std::move(group)), hooks_(std::make_unique<Hooks>()) {
  if (!group_) throw std::invalid_argument("BucketedAllReduce: the process group is null");
  if (!(options_.bucket_cap_mb() > 0.0) || !std::isfinite(options_.bucket_cap_mb())) {
    throw std::invalid_argument(fmt::format("BucketedAllReduce: bucket_cap_mb must be a positive number of MiB, got {}",
                                            options_.bucket_cap_mb()));
  }
  for (auto& [name, param] : named_params) {
    if (!param.defined() || !param.requires_grad()) continue;
    if (param.is_sparse()) {
      throw std::invalid_argument(
          fmt::format("BucketedAllReduce: parameter '{}' is sparse; only dense parameters are supported", name));
    }
    names_.push_back(std::move(name));
    params_.push_back(param);
  }

  const auto cap_bytes = std::max<int64_t>(1, static_cast<int64_t>(options_.bucket_cap_mb() * 1024.0 * 1024.0));
  assignment_ = assign_buckets(params_, cap_bytes);

  torch::NoGradGuard no_grad;
  slots_.resize(params_.size());
  bucket_of_.resize(params_.size());
  buckets_.resize(assignment_.size());
  for (std::size_t b = 0; b < assignment_.size(); ++b) {
    auto& bucket = buckets_[b];
    bucket.params = assignment_[b];
    int64_t total = 0;
    for (auto i : bucket.params) total += params_[i].numel();
    bucket.buffer = torch::zeros({total}, params_[bucket.params.front()].options());
    if (detail::stage_in_fp32(*group_, bucket.buffer.scalar_type())) {
      bucket.staging = torch::empty({total}, bucket.buffer.options().dtype(torch::kFloat));
    }
    int64_t offset = 0;
    for (auto i : bucket.params) {
      slots_[i] = bucket.buffer.narrow(0, offset, params_[i].numel()).view(params_[i].sizes());
      offset += params_[i].numel();
      bucket_of_[i] = b;
    }
  }
  if (options_.gradient_as_bucket_view()) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto& grad = params_[i].mutable_grad();
      if (grad.defined()) slots_[i].copy_(grad);
      grad = slots_[i];
    }
  }
  grad_ready_.assign(params_.size(), false);
  reset_pass();

  hooks_->handles.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    hooks_->handles.push_back(compat::add_grad_accumulated_hook(params_[i], [this, i] { on_grad_ready(i); }));
  }
}

BucketedAllReduce::~BucketedAllReduce() {
  for (const auto& hook : hooks_->handles) compat::remove_grad_accumulated_hook(hook);
}

void BucketedAllReduce::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_ = enabled;
}

bool BucketedAllReduce::sync_enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sync_;
}

int64_t BucketedAllReduce::synchronized_passes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return synchronized_passes_;
}

void BucketedAllReduce::zero_grad() {
  std::lock_guard<std::mutex> lock(mutex_);
  torch::NoGradGuard no_grad;
  if (options_.gradient_as_bucket_view()) {
    for (auto& bucket : buckets_) bucket.buffer.zero_();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto& grad = params_[i].mutable_grad();
      if (!grad.is_same(slots_[i])) grad = slots_[i];
    }
    return;
  }
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (!grads.empty()) at::_foreach_zero_(grads);
}

void BucketedAllReduce::prepare_for_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pass_active_) reset_pass();
}

void BucketedAllReduce::on_grad_ready(std::size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sync_) return;
  if (!pass_active_) {
    pass_active_ = true;
    compat::queue_end_of_backward_callback([this] { finish_backward(); });
  }
  if (grad_ready_[i]) {
    throw std::logic_error(fmt::format(
        "BucketedAllReduce: the gradient of '{}' was accumulated twice in one backward pass; nested (reentrant) "
        "backward passes such as reentrant activation checkpointing are not supported",
        names_[i]));
  }
  grad_ready_[i] = true;
  gradient_to_bucket(i);
  auto& bucket = buckets_[bucket_of_[i]];
  if (--bucket.pending == 0) {
    bucket.ready = true;
    launch_ready_buckets();
  }
}

void BucketedAllReduce::gradient_to_bucket(std::size_t i) {
  torch::NoGradGuard no_grad;
  auto& grad = params_[i].mutable_grad();
  if (options_.gradient_as_bucket_view()) {
    if (grad.is_same(slots_[i])) return;
    // The gradient was set to undefined (or replaced) since the last step, so autograd
    // accumulated into a fresh tensor: bring it back into the bucket.
    if (grad.defined()) {
      slots_[i].copy_(grad);
    } else {
      slots_[i].zero_();
    }
    grad = slots_[i];
    return;
  }
  if (grad.defined()) {
    slots_[i].copy_(grad);
  } else {
    slots_[i].zero_();
  }
}

void BucketedAllReduce::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready) {
    auto& bucket = buckets_[next_launch_++];
    // The average of one rank's gradients is themselves.
    if (group_->size() == 1) continue;
    if (bucket.staging.defined()) {
      bucket.staging.copy_(bucket.buffer);
      bucket.work = group_->all_reduce(bucket.staging, dist::ReduceOp::kAvg);
    } else {
      bucket.work = group_->all_reduce(bucket.buffer, dist::ReduceOp::kAvg);
    }
  }
}

void BucketedAllReduce::finish_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    std::vector<std::size_t> missing;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!grad_ready_[i]) missing.push_back(i);
    }
    if (!missing.empty() && !options_.find_unused_parameters()) {
      // Complete what was launched so that no collective is left half-matched, then fail.
      for (std::size_t b = 0; b < next_launch_; ++b) buckets_[b].work.wait();
      std::vector<std::string> names;
      for (auto i : missing) names.push_back(names_[i]);
      throw std::runtime_error(fmt::format(
          "data-parallel gradient all-reduce over {}: {} parameter(s) received no gradient in this backward pass: "
          "[{}]. They did not contribute to the loss, so their buckets never fill and the ranks cannot synchronise. "
          "Set find_unused_parameters=true (the torch_ddp plugin option, or BucketedAllReduceOptions), or remove "
          "those parameters from the model or set requires_grad=false on them.",
          group_->describe(), missing.size(), fmt::join(names, ", ")));
    }

    // Parameters without a gradient in this pass (find_unused_parameters): whatever they hold
    // (zero, or gradients accumulated under no_sync) joins the reduction.
    std::vector<bool> has_grad(params_.size(), true);
    for (auto i : missing) {
      has_grad[i] = params_[i].grad().defined();
      gradient_to_bucket(i);
    }
    for (auto& bucket : buckets_) bucket.ready = true;
    launch_ready_buckets();

    // Without bucket views a parameter that has no gradient on ANY rank keeps an undefined
    // gradient, so that optimizers skip it as they would in single-process training (with
    // views every gradient is always defined, as in PyTorch's DDP). Which parameters those are
    // takes an exchange that every rank joins, whatever it found missing itself.
    std::vector<bool> used_anywhere = has_grad;
    const bool exchange =
        options_.find_unused_parameters() && !options_.gradient_as_bucket_view() && group_->size() > 1;
    dist::Work usage_work;
    torch::Tensor usage;
    if (exchange) {
      std::vector<int32_t> flags(has_grad.begin(), has_grad.end());
      usage = torch::tensor(flags, torch::kInt32).to(buckets_.front().buffer.device());
      usage_work = group_->all_reduce(usage, dist::ReduceOp::kMax);
    }
    for (auto& bucket : buckets_) {
      bucket.work.wait();
      if (bucket.staging.defined() && group_->size() > 1) bucket.buffer.copy_(bucket.staging);
    }
    if (exchange) {
      usage_work.wait();
      const auto on_host = usage.cpu();
      const auto* flag = on_host.data_ptr<int32_t>();
      for (std::size_t i = 0; i < params_.size(); ++i) used_anywhere[i] = flag[i] != 0;
    }
    if (!options_.gradient_as_bucket_view()) bucket_to_gradients(used_anywhere);
    ++synchronized_passes_;
    reset_pass();
  } catch (...) {
    reset_pass();
    throw;
  }
}

void BucketedAllReduce::bucket_to_gradients(const std::vector<bool>& used_anywhere) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& grad = params_[i].mutable_grad();
    if (grad.defined()) {
      grad.copy_(slots_[i]);
    } else if (used_anywhere[i]) {
      grad = slots_[i].clone();
    }
  }
}

void BucketedAllReduce::reset_pass() {
  pass_active_ = false;
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.ready = false;
    bucket.work = dist::Work();
  }
  next_launch_ = 0;
}

}  // namespace colo::ddp
