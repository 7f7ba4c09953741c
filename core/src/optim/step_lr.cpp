#include <colo/optim/step_lr.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace colo::optim {
namespace {

void check_decay(const char* scheduler, double gamma, int64_t warmup_steps) {
  if (!(gamma > 0) || !std::isfinite(gamma)) throw std::invalid_argument(fmt::format("{}: gamma {} must be positive", scheduler, gamma));
  if (warmup_steps < 0) throw std::invalid_argument(fmt::format("{}: warmup_steps {} must be >= 0", scheduler, warmup_steps));
}

double warmup_lr(int64_t step, int64_t warmup_steps, double base_lr) {
  return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
}

}  // namespace

StepLR::StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma, int64_t warmup_steps)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma), warmup_steps_(warmup_steps) {
  if (step_size < 1) throw std::invalid_argument(fmt::format("StepLR: step_size {} must be >= 1", step_size));
  check_decay("StepLR", gamma, warmup_steps);
  apply();
}

double StepLR::compute_lr(int64_t step, double base_lr) const {
  if (step < warmup_steps_) return warmup_lr(step, warmup_steps_, base_lr);
  return base_lr * std::pow(gamma_, static_cast<double>(step / step_size_));
}

MultiStepLR::MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma,
                         int64_t warmup_steps)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma), warmup_steps_(warmup_steps) {
  if (milestones_.empty() || milestones_.front() < 1 ||
      std::adjacent_find(milestones_.begin(), milestones_.end(), std::greater_equal<>()) != milestones_.end()) {
    throw std::invalid_argument(
        fmt::format("MultiStepLR: milestones [{}] must be positive and increasing", fmt::join(milestones_, ", ")));
  }
  check_decay("MultiStepLR", gamma, warmup_steps);
  apply();
}

double MultiStepLR::compute_lr(int64_t step, double base_lr) const {
  if (step < warmup_steps_) return warmup_lr(step, warmup_steps_, base_lr);
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

}  // namespace colo::optim
