#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace colo::optim {

// Drives the learning rate of every parameter group of an optimizer (any
// torch::optim::Optimizer) as a pure function of the step count:
//     lr(group) = compute_lr(step_count(), base_lr(group))
// The base learning rates are the groups' learning rates when the scheduler is constructed.
// Construction already sets the learning rates of step 0 (as PyTorch's schedulers do); call
// step() once after each optimizer step.
//
// The scheduler holds a reference to the optimizer, which must outlive it (or be replaced
// through rebind()).
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances the step count by one and sets every group's learning rate.
  void step();
  int64_t step_count() const { return step_count_; }
  // The learning rates last set, one per group.
  const std::vector<double>& last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // {"step_count": n, "base_lr.0": lr0, "base_lr.1": lr1, ...}: plain numbers, for JSON
  // checkpoints. Loading restores them and sets the optimizer's learning rates accordingly;
  // it throws std::invalid_argument on a missing key or a different number of groups.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);
  // load_state_dict's checks alone: throws as it would, changes nothing.
  void check_state_dict(const std::map<std::string, double>& state) const;

  // Drives `optimizer` from now on (e.g. a plugin's wrapper around the user's optimizer), which
  // must have as many groups; its learning rates are set for the current step at once.
  void rebind(torch::optim::Optimizer& optimizer);

 protected:
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  // The learning rate after `step` calls of step(), for a group whose base rate is `base_lr`.
  virtual double compute_lr(int64_t step, double base_lr) const = 0;
  // Sets the learning rates of the current step; a derived constructor calls it last.
  void apply();

 private:
  // A state dict's step count and base rates, checked against this scheduler's groups.
  std::pair<int64_t, std::vector<double>> parse_state_dict(const std::map<std::string, double>& state) const;

  torch::optim::Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t step_count_ = 0;
};

}  // namespace colo::optim
