#include "schedule.h"

#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <colo/optim/linear_warmup_lr.h>
#include <colo/optim/step_lr.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace train_vit {

Schedule make_schedule(const TrainOptions& o, torch::optim::Optimizer& optimizer, int64_t steps_per_epoch) {
  Schedule s;
  s.per_epoch = o.schedule_per == "epoch";
  const int64_t unit = s.per_epoch ? 1 : steps_per_epoch;  // schedule steps per epoch
  const int64_t total = o.epochs * unit;
  const int64_t warmup =
      o.warmup_steps ? *o.warmup_steps
                     : std::min(total, static_cast<int64_t>(std::llround(o.warmup_epochs * static_cast<double>(unit))));
  if (warmup > total) {
    throw UsageError(fmt::format("--warmup-steps {}: longer than the run ({} steps)", warmup, total));
  }
  const char* what = s.per_epoch ? "epochs" : "steps";
  if (o.schedule == "cosine") {
    s.scheduler = std::make_shared<colo::optim::CosineAnnealingWarmupLR>(optimizer, total, warmup);
    s.description = fmt::format("warmup {} {}, cosine to 0", warmup, what);
  } else if (o.schedule == "linear") {
    s.scheduler = std::make_shared<colo::optim::LinearWarmupLR>(optimizer, total, warmup);
    s.description = fmt::format("warmup {} {}, linear to 0", warmup, what);
  } else if (o.schedule == "step") {
    s.scheduler = std::make_shared<colo::optim::StepLR>(optimizer, o.lr_step_epochs * unit, o.lr_gamma, warmup);
    s.description = fmt::format("warmup {} {}, x{:g} every {} {}", warmup, what, o.lr_gamma, o.lr_step_epochs * unit, what);
  } else {
    std::vector<int64_t> milestones;
    for (const int64_t epoch : o.lr_milestones) milestones.push_back(epoch * unit);
    s.scheduler = std::make_shared<colo::optim::MultiStepLR>(optimizer, milestones, o.lr_gamma, warmup);
    s.description = fmt::format("warmup {} {}, x{:g} at {} {}", warmup, what, o.lr_gamma, what, fmt::join(milestones, ", "));
  }
  if (s.per_epoch) s.description += " (stepped per epoch)";
  return s;
}

}  // namespace train_vit
