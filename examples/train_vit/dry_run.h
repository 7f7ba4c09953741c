#pragma once

#include <colo/dist/environment.h>
#include <colo/nn/vit_config.h>

#include "train_options.h"

namespace train_vit {

// --dry-run: prints, on the launcher's rank 0, the plugin's memory plan (colo::Booster::
// plan_memory) for the model, batch and world the options describe, and returns the exit status.
// Builds no model (it is summarised from its configuration, nothing allocated), no process group,
// no data loader; makes the checks of the run's layout the run makes (layout_checks.h).
int print_memory_plan(const TrainOptions& options, const colo::nn::ViTConfig& config,
                      const colo::dist::Environment& env);

}  // namespace train_vit
