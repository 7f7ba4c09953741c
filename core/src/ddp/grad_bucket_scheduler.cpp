#include <colo/compat/backward_callbacks.h>
#include <colo/compat/torch_compat.h>
#include <colo/ddp/grad_bucket_scheduler.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace colo::ddp {

struct GradBucketScheduler::Hooks {
  std::vector<compat::GradAccumulatedHook> handles;
};

GradBucketScheduler::GradBucketScheduler(std::vector<torch::Tensor> params, std::vector<std::string> names,
                                         std::vector<std::vector<std::size_t>> buckets, GradBucketCallbacks callbacks,
                                         bool launch_during_backward)
    : params_(std::move(params)),
      names_(std::move(names)),
      buckets_(std::move(buckets)),
      callbacks_(std::move(callbacks)),
      launch_during_backward_(launch_during_backward),
      hooks_(std::make_unique<Hooks>()) {
  if (names_.size() != params_.size()) {
    throw std::invalid_argument(
        fmt::format("GradBucketScheduler: {} names for {} parameters", names_.size(), params_.size()));
  }
  if (!callbacks_.grad_ready || !callbacks_.launch || !callbacks_.finish) {
    throw std::invalid_argument("GradBucketScheduler: every callback (grad_ready, launch, finish) is required");
  }
  constexpr auto kNone = static_cast<std::size_t>(-1);
  bucket_of_.assign(params_.size(), kNone);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (auto i : buckets_[b]) {
      if (i >= params_.size() || bucket_of_[i] != kNone) {
        throw std::invalid_argument(fmt::format(
            "GradBucketScheduler: bucket {} lists parameter {}, which is out of range or in another bucket too", b, i));
      }
      bucket_of_[i] = b;
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (bucket_of_[i] == kNone) {
      throw std::invalid_argument(fmt::format("GradBucketScheduler: parameter '{}' is in no bucket", names_[i]));
    }
  }
  grad_ready_.assign(params_.size(), false);
  pending_.resize(buckets_.size());
  ready_.resize(buckets_.size());
  reset_pass();

  hooks_->handles.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    hooks_->handles.push_back(compat::add_grad_accumulated_hook(params_[i], [this, i] { on_grad_ready(i); }));
  }
}

GradBucketScheduler::~GradBucketScheduler() {
  for (const auto& hook : hooks_->handles) compat::remove_grad_accumulated_hook(hook);
}

void GradBucketScheduler::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_ = enabled;
}

bool GradBucketScheduler::sync_enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sync_;
}

int64_t GradBucketScheduler::synchronized_passes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return synchronized_passes_;
}

void GradBucketScheduler::prepare_for_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pass_active_) reset_pass();
}

void GradBucketScheduler::on_grad_ready(std::size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sync_) return;
  if (!pass_active_) {
    pass_active_ = true;
    compat::queue_end_of_backward_callback([this] { finish_backward(); });
  }
  if (grad_ready_[i]) {
    throw std::logic_error(fmt::format(
        "the gradient of '{}' was accumulated twice in one backward pass; nested (reentrant) backward passes such as "
        "reentrant activation checkpointing are not supported by bucketed gradient reduction",
        names_[i]));
  }
  grad_ready_[i] = true;
  callbacks_.grad_ready(i);
  const auto b = bucket_of_[i];
  if (--pending_[b] == 0) {
    ready_[b] = true;
    if (launch_during_backward_) launch_ready_buckets();
  }
}

void GradBucketScheduler::reduce_accumulated() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pass_active_) {
      throw std::logic_error(
          "GradBucketScheduler::reduce_accumulated: a backward pass is in flight; call it after backward has returned");
    }
    reset_pass();
    pass_active_ = true;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].grad().defined()) continue;
      grad_ready_[i] = true;
      callbacks_.grad_ready(i);
      const auto b = bucket_of_[i];
      if (--pending_[b] == 0) ready_[b] = true;
    }
    launch_ready_buckets();
  }
  finish_backward();
}

void GradBucketScheduler::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && ready_[next_launch_]) callbacks_.launch(next_launch_++);
}

void GradBucketScheduler::launch_remaining() {
  std::fill(ready_.begin(), ready_.end(), true);
  launch_ready_buckets();
}

void GradBucketScheduler::finish_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    std::vector<std::size_t> missing;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!grad_ready_[i]) missing.push_back(i);
    }
    callbacks_.finish(missing);
    ++synchronized_passes_;
    reset_pass();
  } catch (...) {
    reset_pass();
    throw;
  }
}

void GradBucketScheduler::reset_pass() {
  pass_active_ = false;
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].size();
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

}  // namespace colo::ddp
