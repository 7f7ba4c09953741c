#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <mutex>
#include <vector>

namespace colo::nn {

// Weight-gradient work set aside during a backward pass, to run later: zero-bubble pipeline
// schedules split a layer's backward into B, the input gradient (which the previous stage waits
// for), and W, the weight gradient (which nobody waits for, so it can fill the pipeline's idle
// time). While a WeightGradDeferral is active, colo::nn::linear and colo::nn::layer_norm compute
// only their input gradient in backward and add here how to compute their weight and bias
// gradients; run() does that work, accumulating into the parameters' .grad as autograd would
// (set when undefined, added otherwise). Other layers (the patch embedding's convolution, the
// position embedding) keep computing all their gradients in B.
//
// Gradient hooks on the parameters do not fire for the deferred part: what reduces gradients
// after a zero-bubble step does so from .grad (GradBucketScheduler::reduce_accumulated).
class DeferredWeightGrads {
 public:
  // Thread-safe: autograd runs CUDA backward passes on its own device threads.
  void add(std::function<void()> work);
  // Runs every recorded piece of work in recording order, then forgets it. Without autograd.
  void run();
  std::size_t size() const;
  bool empty() const { return size() == 0; }

 private:
  mutable std::mutex mutex_;
  std::vector<std::function<void()>> work_;
};

// For its lifetime, backward passes anywhere in the process defer their weight gradients into
// `store` (see above). A process-wide setting rather than a thread-local one because autograd
// runs CUDA backward work on device threads, not the caller's; one deferral at a time (nesting
// is an error), which the pipeline, the one user, guarantees.
class WeightGradDeferral {
 public:
  explicit WeightGradDeferral(DeferredWeightGrads& store);
  ~WeightGradDeferral();
  WeightGradDeferral(const WeightGradDeferral&) = delete;
  WeightGradDeferral& operator=(const WeightGradDeferral&) = delete;

  // The store backward passes defer into now; null when none is active.
  static DeferredWeightGrads* active();
};

// Adds `grad` into `param`'s .grad as autograd's AccumulateGrad does (a fresh tensor when it
// has none). Without autograd.
void accumulate_grad(const torch::Tensor& param, const torch::Tensor& grad);

}  // namespace colo::nn
