#pragma once

#include <colo/trainer/trainer_hooks.h>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::detail {

// NonFiniteLossHook's engine (train_vit's --max-nonfinite-steps N): ends the run when the loss
// is NaN or infinite for N consecutive optimizer steps on any rank. Steps the fp16 loss scaler skips for overflowing gradients have a
// finite loss, so they do not count; a step whose loss itself overflowed does.
//
// The loss stays on the device: every step adds a few scalar operations there (no host sync), and
// the longest run of non-finite steps so far is read only by check(), every N steps. A run of N is
// thus caught at most N - 1 steps after its N-th step, at one host sync and one tiny all-gather
// per N steps, which a GPU step does not feel.
class NonFiniteLossGuard {
 public:
  // limit: the N above (0: never stop); the counters live on `device`.
  // limit_name and advice go into the error's message: what the user sets, and what to change.
  NonFiniteLossGuard(int64_t limit, c10::Device device, std::string limit_name, std::string advice);

  // One micro-batch's loss (a scalar tensor on the device).
  void observe(const torch::Tensor& loss);
  // Closes optimizer step `step` (counted from 1): a non-finite micro-batch loss makes it a
  // non-finite step.
  void end_step(int64_t step);
  // Whether check() is due after `step` (`last_step`: the run's final step, always checked).
  bool due(int64_t step, int64_t last_step) const;
  // After step `step`: throws NonFiniteLossError when some rank has seen `limit` consecutive
  // non-finite steps. Collective over `world` (null: a job of one): every rank calls it after the
  // same step. `skipped_steps`: the loss scaler's skipped steps, for the message.
  void check(int64_t step, const std::shared_ptr<colo::dist::ProcessGroup>& world, int64_t skipped_steps) const;

 private:
  int64_t limit_;
  std::string limit_name_;
  std::string advice_;
  torch::Tensor step_bad_;  // bool: a non-finite micro-batch loss in the current step
  // float64 [current run, longest run, last step of the longest run]
  torch::Tensor runs_;
};

}  // namespace colo::detail
