#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <colo/optim/linear_warmup_lr.h>
#include <colo/optim/lr_scheduler.h>
#include <colo/optim/optimizer_state.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace colo::optim {
namespace {

constexpr double kPi = 3.14159265358979323846;

void validate_steps(const char* scheduler, int64_t total_steps, int64_t warmup_steps) {
  if (total_steps < 1) {
    throw std::invalid_argument(fmt::format("{}: total_steps {} must be >= 1", scheduler, total_steps));
  }
  if (warmup_steps < 0 || warmup_steps > total_steps) {
    throw std::invalid_argument(
        fmt::format("{}: warmup_steps {} must lie in [0, total_steps = {}]", scheduler, warmup_steps, total_steps));
  }
}

std::string base_lr_key(size_t group) { return fmt::format("base_lr.{}", group); }

}  // namespace

// ---- LRScheduler -----------------------------------------------------------------------------

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(&optimizer) {
  const size_t groups = optimizer.param_groups().size();
  for (size_t g = 0; g < groups; ++g) base_lrs_.push_back(get_lr(optimizer, g));
}

void LRScheduler::apply() {
  const size_t groups = optimizer_->param_groups().size();
  if (groups != base_lrs_.size()) {
    throw std::logic_error(fmt::format(
        "LRScheduler: the optimizer has {} parameter groups but the scheduler was built for {}; add parameter "
        "groups before creating the scheduler",
        groups, base_lrs_.size()));
  }
  last_lr_.clear();
  for (size_t g = 0; g < groups; ++g) {
    last_lr_.push_back(compute_lr(step_count_, base_lrs_[g]));
    set_lr(*optimizer_, g, last_lr_.back());
  }
}

void LRScheduler::step() {
  ++step_count_;
  apply();
}

std::map<std::string, double> LRScheduler::state_dict() const {
  std::map<std::string, double> state{{"step_count", static_cast<double>(step_count_)}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) state[base_lr_key(g)] = base_lrs_[g];
  return state;
}

void LRScheduler::load_state_dict(const std::map<std::string, double>& state) {
  auto [step_count, base_lrs] = parse_state_dict(state);
  step_count_ = step_count;
  base_lrs_ = std::move(base_lrs);
  apply();
}

void LRScheduler::check_state_dict(const std::map<std::string, double>& state) const { (void)parse_state_dict(state); }

std::pair<int64_t, std::vector<double>> LRScheduler::parse_state_dict(const std::map<std::string, double>& state) const {
  auto it = state.find("step_count");
  if (it == state.end() || !(it->second >= 0.0) || it->second != std::floor(it->second)) {
    throw std::invalid_argument(
        "LR scheduler state: 'step_count' is missing or not a non-negative whole number; was it saved by "
        "LRScheduler::state_dict()?");
  }
  const auto step_count = static_cast<int64_t>(it->second);
  std::vector<double> base_lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    auto lr = state.find(base_lr_key(g));
    if (lr == state.end()) {
      throw std::invalid_argument(
          fmt::format("LR scheduler state has no '{}': it was saved for fewer than {} "
                      "parameter groups",
                      base_lr_key(g), base_lrs_.size()));
    }
    base_lrs.push_back(lr->second);
  }
  if (state.count(base_lr_key(base_lrs_.size()))) {
    throw std::invalid_argument(
        fmt::format("LR scheduler state was saved for more than {} parameter groups", base_lrs_.size()));
  }
  return {step_count, std::move(base_lrs)};
}

void LRScheduler::rebind(torch::optim::Optimizer& optimizer) {
  if (optimizer.param_groups().size() != base_lrs_.size()) {
    throw std::invalid_argument(
        fmt::format("LRScheduler::rebind: the new optimizer has {} parameter groups, the "
                    "scheduler drives {}",
                    optimizer.param_groups().size(), base_lrs_.size()));
  }
  optimizer_ = &optimizer;
  apply();
}

// ---- CosineAnnealingWarmupLR -----------------------------------------------------------------

CosineAnnealingWarmupLR::CosineAnnealingWarmupLR(torch::optim::Optimizer& optimizer, int64_t total_steps,
                                                 int64_t warmup_steps, double eta_min)
    : LRScheduler(optimizer), total_steps_(total_steps), warmup_steps_(warmup_steps), eta_min_(eta_min) {
  validate_steps("CosineAnnealingWarmupLR", total_steps, warmup_steps);
  if (!(eta_min >= 0.0)) {
    throw std::invalid_argument(fmt::format("CosineAnnealingWarmupLR: eta_min {} must be >= 0", eta_min));
  }
  apply();
}

double CosineAnnealingWarmupLR::compute_lr(int64_t step, double base_lr) const {
  if (step < warmup_steps_) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  if (step >= total_steps_) return eta_min_;
  const double progress = static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  return eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(kPi * progress)) / 2.0;
}

// ---- LinearWarmupLR --------------------------------------------------------------------------

LinearWarmupLR::LinearWarmupLR(torch::optim::Optimizer& optimizer, int64_t total_steps, int64_t warmup_steps)
    : LRScheduler(optimizer), total_steps_(total_steps), warmup_steps_(warmup_steps) {
  validate_steps("LinearWarmupLR", total_steps, warmup_steps);
  apply();
}

double LinearWarmupLR::compute_lr(int64_t step, double base_lr) const {
  if (step < warmup_steps_) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_ + 1);
  if (step >= total_steps_) return 0.0;
  return base_lr * static_cast<double>(total_steps_ - step) / static_cast<double>(total_steps_ - warmup_steps_);
}

}  // namespace colo::optim
