#pragma once

#include <colo/optim/lr_scheduler.h>

#include <vector>

namespace colo::optim {

// Linear warmup, then step decay (Colossal-AI's StepLR, with its warmup as CosineAnnealingWarmupLR's).
// At step t, for base rate b, W = warmup_steps:
//   t < W:   b * (t + 1) / W
//   t >= W:  b * gamma^floor(t / step_size)          (t counted from the first step, warmup included)
// Throws std::invalid_argument unless step_size >= 1, gamma > 0 and warmup_steps >= 0.
class StepLR : public LRScheduler {
 public:
  StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t warmup_steps = 0);

 protected:
  double compute_lr(int64_t step, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
  int64_t warmup_steps_;
};

// Linear warmup, then a decay by gamma at each milestone (Colossal-AI's MultiStepLR /
// MultiStepWarmupLR): for t >= W, b * gamma^(number of milestones <= t), milestones in steps from
// the first. Throws std::invalid_argument unless the milestones are positive and increasing,
// gamma > 0 and warmup_steps >= 0.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1,
              int64_t warmup_steps = 0);

 protected:
  double compute_lr(int64_t step, double base_lr) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
  int64_t warmup_steps_;
};

}  // namespace colo::optim
