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

BucketedAllReduce::BucketedAllReduce(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                                     std::shared_ptr<dist::ProcessGroup> group, BucketedAllReduceOptions options)
    : options_(options), group_(std::move(group)) {
  if (!group_) throw std::invalid_argument("BucketedAllReduce: the process group is null");
  constexpr double kMaxCapMb = static_cast<double>(kMaxBucketCapBytes >> 20);
  if (!(options_.bucket_cap_mb() > 0.0 && options_.bucket_cap_mb() <= kMaxCapMb)) {
    throw std::invalid_argument(fmt::format(
        "BucketedAllReduce: bucket_cap_mb must be a size in MiB above 0 and at most {:.0f} (1 PiB), got {}", kMaxCapMb,
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
  buckets_.resize(assignment_.size());
  for (std::size_t b = 0; b < assignment_.size(); ++b) {
    auto& bucket = buckets_[b];
    bucket.params = assignment_[b];
    int64_t total = 0;
    for (auto i : bucket.params) total += params_[i].numel();
    bucket.buffer = torch::zeros({total}, params_[bucket.params.front()].options());
    auto travel = options_.communication_dtype().value_or(bucket.buffer.scalar_type());
    if (detail::stage_in_fp32(*group_, travel)) travel = torch::kFloat;
    if (travel != bucket.buffer.scalar_type()) {
      bucket.staging = torch::empty({total}, bucket.buffer.options().dtype(travel));
    }
    int64_t offset = 0;
    for (auto i : bucket.params) {
      slots_[i] = bucket.buffer.narrow(0, offset, params_[i].numel()).view(params_[i].sizes());
      offset += params_[i].numel();
    }
  }
  if (options_.gradient_as_bucket_view()) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto& grad = params_[i].mutable_grad();
      if (grad.defined()) slots_[i].copy_(grad);
      grad = slots_[i];
    }
  }

  GradBucketCallbacks callbacks;
  callbacks.grad_ready = [](std::size_t) {};  // gradients move into the buckets per bucket, in launch()
  callbacks.launch = [this](std::size_t b) { launch(b); };
  callbacks.finish = [this](const std::vector<std::size_t>& missing) { finish_backward(missing); };
  scheduler_ = std::make_unique<GradBucketScheduler>(params_, names_, assignment_, std::move(callbacks),
                                                     options_.overlap_communication());
}

BucketedAllReduce::~BucketedAllReduce() = default;

void BucketedAllReduce::zero_grad() {
  // Dropped rather than zeroed: autograd then hands over each fresh gradient (no fill, no add)
  // and gather() moves a bucket's worth into the buffer in one batched copy. Zeroed views would
  // cost an add per parameter: ~150 launch-bound kernels per ViT-B step, 0.4 ms of GPU time on
  // an H200 (which the step's time did not measurably show; fewer kernels are still less work).
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

void BucketedAllReduce::gather(std::size_t b) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> slots, grads, unset;
  for (auto i : buckets_[b].params) {
    auto& grad = params_[i].mutable_grad();
    if (grad.is_same(slots_[i])) continue;  // accumulated in place, into its view
    if (grad.defined()) {
      slots.push_back(slots_[i]);
      grads.push_back(grad);
    } else {
      unset.push_back(slots_[i]);  // no gradient in this pass (find_unused_parameters)
    }
    if (options_.gradient_as_bucket_view()) grad = slots_[i];
  }
  compat::foreach_copy(slots, grads);
  if (!unset.empty()) at::_foreach_zero_(unset);
}

void BucketedAllReduce::launch(std::size_t b) {
  auto& bucket = buckets_[b];
  gather(b);
  // The average of one rank's gradients is themselves.
  if (group_->size() == 1) return;
  if (bucket.staging.defined()) {
    bucket.staging.copy_(bucket.buffer);
    bucket.work = group_->all_reduce(bucket.staging, dist::ReduceOp::kAvg);
  } else {
    bucket.work = group_->all_reduce(bucket.buffer, dist::ReduceOp::kAvg);
  }
}

void BucketedAllReduce::finish_backward(const std::vector<std::size_t>& missing) {
  try {
    if (!missing.empty() && !options_.find_unused_parameters()) {
      // Complete what was launched so that no collective is left half-matched, then fail.
      for (std::size_t b = 0; b < scheduler_->launched(); ++b) buckets_[b].work.wait();
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
    for (auto i : missing) has_grad[i] = params_[i].grad().defined();
    scheduler_->launch_remaining();

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
  } catch (...) {
    for (auto& bucket : buckets_) bucket.work = dist::Work();
    throw;
  }
  for (auto& bucket : buckets_) bucket.work = dist::Work();
}

void BucketedAllReduce::bucket_to_gradients(const std::vector<bool>& used_anywhere) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, slots;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& grad = params_[i].mutable_grad();
    if (grad.defined()) {
      grads.push_back(grad);
      slots.push_back(slots_[i]);
    } else if (used_anywhere[i]) {
      grad = slots_[i].clone();
    }
  }
  compat::foreach_copy(grads, slots);
}

}  // namespace colo::ddp
