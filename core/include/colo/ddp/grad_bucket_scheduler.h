#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace colo::ddp {

// What a bucketed gradient reduction does at each point of a synchronised backward pass. Called
// on the autograd thread (the end-of-pass callback too), one call at a time.
struct GradBucketCallbacks {
  // Parameter i's gradient has just been accumulated into its .grad(): take it into its bucket.
  std::function<void(std::size_t param)> grad_ready;
  // Every gradient of bucket b is in: start its collective. Buckets are launched in order 0, 1, …
  std::function<void(std::size_t bucket)> launch;
  // The pass has ended. `missing` lists the parameters whose gradient never came (their buckets
  // are not launched). It must leave no collective half-matched: launch_remaining() launches
  // what is left; an exception fails the backward pass.
  std::function<void(const std::vector<std::size_t>& missing)> finish;
};

// The hook machinery that every data-parallel gradient reduction shares (ddp::BucketedAllReduce
// all-reduces buckets, ZeRO-2 reduce-scatters them): it knows when each bucket's gradients are
// all in and when the backward pass has ended, and leaves what to do then to its callbacks.
//
//   - A post hook on each parameter's gradient accumulator fires once autograd has accumulated
//     its gradient: grad_ready(i). When a bucket's last gradient has arrived, the bucket is
//     ready; ready buckets are launched IN ORDER on every rank (bucket b only after buckets < b):
//     collectives are matched by order, and hooks can fire in another order on other ranks.
//     With launch_during_backward off, nothing is launched before the end of the pass (no
//     overlap with backward, but no collective in flight while backward allocates).
//   - The first hook of a pass queues a callback on the autograd engine that runs after the
//     whole pass: finish(missing).
// Hooks do constant work and never synchronise with the device. With sync off (no_sync),
// hooks do nothing and gradients accumulate in param.grad.
//
// The parameters must already have their final device and dtype: LibTorch drops a tensor's
// gradient accumulator (and so these hooks) when set_data() changes either.
//
// Not supported: reentrant activation checkpointing inside the model (its inner backward passes
// would end the pass early); a parameter accumulated twice in one pass is an error.
class GradBucketScheduler {
 public:
  // `buckets`: indices into `params`, each parameter in exactly one bucket, in launch order.
  // `names` name the parameters in error messages.
  GradBucketScheduler(std::vector<torch::Tensor> params, std::vector<std::string> names,
                      std::vector<std::vector<std::size_t>> buckets, GradBucketCallbacks callbacks,
                      bool launch_during_backward = true);
  // Removes the hooks. A backward pass must not be running.
  ~GradBucketScheduler();
  GradBucketScheduler(const GradBucketScheduler&) = delete;
  GradBucketScheduler& operator=(const GradBucketScheduler&) = delete;

  // Off: backward passes accumulate gradients locally without communicating (no_sync).
  void set_sync(bool enabled);
  bool sync_enabled() const;

  // Call before each forward: discards the state of a backward pass that failed midway (an
  // exception inside autograd), which would otherwise keep the next pass from synchronising.
  void prepare_for_backward();

  // Backward passes that ended with finish() succeeding.
  int64_t synchronized_passes() const;

  // Synchronises, now and without a backward pass, the gradients accumulated in param.grad while
  // sync was off, exactly as a synchronised pass would have: grad_ready for every parameter whose
  // gradient is defined, buckets launched in order, then finish(missing) with the rest. The
  // pipeline runs every backward with sync off and then this once per step (its weight-gradient
  // passes run outside autograd, where no hook fires). Not during a backward pass.
  void reduce_accumulated();

  // Only from inside the finish callback: marks every bucket ready and launches, in order,
  // those not launched yet.
  void launch_remaining();
  // Only from inside the finish callback: how many buckets (0, 1, …) were launched so far.
  std::size_t launched() const { return next_launch_; }

 private:
  void on_grad_ready(std::size_t i);
  void finish_backward();
  // Launches every ready bucket whose predecessors are launched. Caller holds mutex_.
  void launch_ready_buckets();
  void reset_pass();

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::vector<std::size_t>> buckets_;
  GradBucketCallbacks callbacks_;
  bool launch_during_backward_;
  std::vector<std::size_t> bucket_of_;
  struct Hooks;  // the gradient-accumulator hooks (their LibTorch types stay out of this header)
  std::unique_ptr<Hooks> hooks_;

  mutable std::mutex mutex_;
  bool sync_ = true;
  // State of the backward pass in flight.
  bool pass_active_ = false;
  std::vector<bool> grad_ready_;
  std::vector<std::size_t> pending_;  // per bucket: gradients still to come
  std::vector<bool> ready_;           // per bucket
  std::size_t next_launch_ = 0;
  int64_t synchronized_passes_ = 0;
};

}  // namespace colo::ddp
