#pragma once

#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/booster/plugin_options.h>
#include <colo/engine/zero_optimizer.h>
#include <colo/plugins/low_level_zero_options.h>

#include <string>

namespace colo::plugins {

// ZeRO stage 1 and 2 (Colossal-AI's LowLevelZeroPlugin) over the world as the data-parallel
// group: every rank holds the whole model in the compute dtype and trains on its shard of each
// global batch; fp32 master weights and Adam's state are sharded over the ranks, and at stage 2
// the gradients too (see ZeroOptimizer for the step and the layout). Optionally the optimizer
// (masters, state, step) runs on the CPU (cpu_offload). The optimizer must be Adam-like
// (torch's Adam / AdamW, colo's HybridAdam).
//
// boost(), in order:
//   1. the data loader is re-sharded over the world (dp = world); a world it cannot be split
//      over (no whole batch per rank) is an error that says so;
//   2. the model moves to the context's device; parameters and buffers are broadcast from
//      rank 0 (every replica starts alike, before any rounding);
//   3. the ZeroOptimizer is built (working weights cast, masters sharded, gathers, gradient
//      hooks: see its order);
//   4. the model is wrapped (forward waits for gathered weights layer by layer); criterion and
//      LR scheduler pass through (the scheduler keeps driving the user's optimizer object,
//      whose learning rates every step reads).
// no_sync works at both stages: gradients accumulate in param.grad; the next synchronised
// backward reduces (stage 1) or reduce-scatters (stage 2) their sum.
class LowLevelZeroPlugin : public Plugin {
 public:
  LowLevelZeroPlugin(const PluginOptions& options, const PluginContext& context);

  std::string name() const override { return "low_level_zero"; }
  const LowLevelZeroOptions& options() const { return options_; }

  Boosted boost(BoostInputs inputs) override;

  // What low_level_zero would hold on each rank (see Booster::plan_memory); low_level_zero_memory_plan.cpp.
  static MemoryPlan plan_memory(const PluginOptions& options, const MemoryPlanInputs& inputs);

 private:
  LowLevelZeroOptions options_;
};

}  // namespace colo::plugins
