#pragma once

#include <colo/optim/lr_scheduler.h>

#include <cstdint>
#include <memory>
#include <string>

#include "train_options.h"

namespace torch::optim {
class Optimizer;
}

namespace train_vit {

// The learning-rate schedule --schedule asks for, in the unit --schedule-per says (an optimizer
// step, or an epoch: the hook then steps it at each finished epoch).
struct Schedule {
  std::shared_ptr<colo::optim::LRScheduler> scheduler;
  bool per_epoch = false;
  std::string description;  // for the console's "schedule:" line
};

// Builds it for `steps_per_epoch` optimizer steps per epoch. Throws UsageError where the options
// do not fit (a milestone beyond the run, warmup longer than the run).
Schedule make_schedule(const TrainOptions& options, torch::optim::Optimizer& optimizer, int64_t steps_per_epoch);

}  // namespace train_vit
