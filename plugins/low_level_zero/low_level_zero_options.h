#pragma once

#include <colo/booster/plugin_options.h>
#include <colo/engine/zero_optimizer.h>
#include <torch/arg.h>

namespace colo::plugins {

// low_level_zero's options, parsed and validated from the plugin's string map in one step.
struct LowLevelZeroOptions {
  // The ZeroOptimizer's options (stage, precision, buckets, offload), its caller "low_level_zero".
  TORCH_ARG(ZeroOptimizerOptions, zero) = ZeroOptimizerOptions().caller("low_level_zero");

 public:

  // Throws std::invalid_argument listing every ill-typed value, violated rule (stage 3 says to
  // use the gemini plugin) and unknown key (with the valid keys).
  static LowLevelZeroOptions parse(const PluginOptions& options);
};

}  // namespace colo::plugins
