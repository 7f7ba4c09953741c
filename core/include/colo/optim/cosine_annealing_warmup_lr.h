#pragma once

#include <colo/optim/lr_scheduler.h>

namespace colo::optim {

// Linear warmup, then cosine annealing (Colossal-AI's CosineAnnealingWarmupLR, with the
// schedule pinned after its end). At step t, for base rate b, W = warmup_steps, T = total_steps:
//   t < W:       b * (t + 1) / W                   (b / W at step 0, b at step W - 1)
//   W <= t < T:  eta_min + (b - eta_min) * (1 + cos(pi * (t - W) / (T - W))) / 2
//   t >= T:      eta_min                           (it stays there, unlike PyTorch's cosine)
// Throws std::invalid_argument unless total_steps >= 1, 0 <= warmup_steps <= total_steps and
// eta_min >= 0.
class CosineAnnealingWarmupLR : public LRScheduler {
 public:
  CosineAnnealingWarmupLR(torch::optim::Optimizer& optimizer, int64_t total_steps, int64_t warmup_steps = 0,
                          double eta_min = 0.0);

 protected:
  double compute_lr(int64_t step, double base_lr) const override;

 private:
  int64_t total_steps_;
  int64_t warmup_steps_;
  double eta_min_;
};

}  // namespace colo::optim
