#pragma once

#include <colo/booster/plugin_options.h>
#include <colo/engine/zero_optimizer.h>
#include <colo/nn/fp8_scaling.h>
#include <torch/arg.h>

namespace colo {

// low_level_zero's options, parsed and validated from the plugin's string map in one step, and
// written back to it: PluginRegistry::global().create(LowLevelZeroOptions().zero(...)).
struct LowLevelZeroOptions {
  // The ZeroOptimizer's options (stage, precision, buckets, offload), its caller "low_level_zero".
  // Its caller, grad_norm_sum_over and tp_group are no options: the plugin keeps them as they are.
  TORCH_ARG(ZeroOptimizerOptions, zero) = ZeroOptimizerOptions().caller("low_level_zero");
  // precision=fp8's scaling (PrecisionOptions' fp8_* keys).
  TORCH_ARG(nn::Fp8Recipe, fp8) = {};

 public:
  // Throws std::invalid_argument listing every ill-typed value, violated rule (stage 3 says to
  // use the gemini plugin) and unknown key (with the valid keys).
  static LowLevelZeroOptions parse(const PluginOptions& options);
  // The keys parse() reads, for the fields that differ from the defaults: parse(to_options())
  // gives these options back, and a default struct gives an empty map. (cuda_graphs, a key with
  // no field, is never written: only its default, false, is valid.)
  PluginOptions to_options() const;

  static constexpr const char* kPluginName = "low_level_zero";
};

}  // namespace colo
