#pragma once

#include <colo/booster/gemini_optimizer.h>
#include <colo/booster/plugin_options.h>

namespace colo::plugins {

// gemini's options, parsed and validated from the plugin's string map in one step.
struct GeminiOptions {
  GeminiOptimizerOptions gemini;

  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key
  // (with the valid keys).
  static GeminiOptions parse(const PluginOptions& options);
};

}  // namespace colo::plugins
