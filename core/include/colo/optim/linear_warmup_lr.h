#pragma once

#include <colo/optim/lr_scheduler.h>

namespace colo::optim {

// Linear warmup, then linear decay to 0 (Colossal-AI's LinearWarmupLR, with the schedule
// pinned after its end). At step t, for base rate b, W = warmup_steps, T = total_steps:
//   t < W:       b * (t + 1) / (W + 1)
//   W <= t < T:  b * (T - t) / (T - W)             (b at step W)
//   t >= T:      0                                 (it stays there)
// Throws std::invalid_argument unless total_steps >= 1 and 0 <= warmup_steps <= total_steps.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(torch::optim::Optimizer& optimizer, int64_t total_steps, int64_t warmup_steps = 0);

 protected:
  double compute_lr(int64_t step, double base_lr) const override;

 private:
  int64_t total_steps_;
  int64_t warmup_steps_;
};

}  // namespace colo::optim
