#pragma once

#include <colo/dist/environment.h>
#include <colo/nn/vit_config.h>

#include "train_options.h"

namespace train_vit {

// --layout auto: asks the planner (colo::planner::plan_layouts) for the best layout of `config`
// at the options' global batch and precision on this job's world (or --world-size with --dry-run)
// and sets the plugin, its options, activation checkpointing and accumulation to it; rank 0
// prints the choice and its predicted throughput. Throws UsageError when nothing fits (saying
// what would) or the cluster/profile file is unusable.
void apply_planned_layout(TrainOptions& options, const colo::nn::ViTConfig& config, const colo::dist::Environment& env);

}  // namespace train_vit
