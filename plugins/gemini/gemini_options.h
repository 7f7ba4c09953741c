#pragma once

#include <colo/booster/plugin_options.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/gemini_optimizer.h>
#include <torch/arg.h>

namespace colo::plugins {

// gemini's options, parsed and validated from the plugin's string map in one step.
struct GeminiOptions {
  // The GeminiChunkOwner's options (precision, chunks, placement, prefetch), its caller "gemini".
  TORCH_ARG(GeminiChunkOptions, chunks) = GeminiChunkOptions().caller("gemini");
  // The GeminiOptimizer's (clipping, fp16's loss scaler), its caller "gemini".
  TORCH_ARG(GeminiOptimizerOptions, optimizer) = GeminiOptimizerOptions().caller("gemini");

 public:

  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key
  // (with the valid keys).
  static GeminiOptions parse(const PluginOptions& options);
};

}  // namespace colo::plugins
