#pragma once

#include <colo/engine/gemini_optimizer.h>
#include <colo/booster/plugin_options.h>
#include <torch/arg.h>

namespace colo::plugins {

// gemini's options, parsed and validated from the plugin's string map in one step.
struct GeminiOptions {
  // The GeminiOptimizer's options (chunks, placement, prefetch, precision), its caller "gemini".
  TORCH_ARG(GeminiOptimizerOptions, gemini) = GeminiOptimizerOptions().caller("gemini");

 public:

  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key
  // (with the valid keys).
  static GeminiOptions parse(const PluginOptions& options);
};

}  // namespace colo::plugins
