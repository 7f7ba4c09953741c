#pragma once

#include <colo/booster/plugin_options.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/nn/fp8_scaling.h>
#include <torch/arg.h>

namespace colo {

// gemini's options, parsed and validated from the plugin's string map in one step, and written
// back to it: PluginRegistry::global().create(GeminiOptions().chunks(...)).
struct GeminiOptions {
  // The GeminiChunkOwner's options (precision, chunks, placement, prefetch), its caller "gemini"
  // (no option: the plugin keeps it as it is).
  TORCH_ARG(GeminiChunkOptions, chunks) = GeminiChunkOptions().caller("gemini");
  // The GeminiOptimizer's (clipping, fp16's loss scaler), its caller "gemini".
  TORCH_ARG(GeminiOptimizerOptions, optimizer) = GeminiOptimizerOptions().caller("gemini");
  // precision=fp8's scaling (PrecisionOptions' fp8_* keys).
  TORCH_ARG(nn::Fp8Recipe, fp8) = {};

 public:
  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key
  // (with the valid keys).
  static GeminiOptions parse(const PluginOptions& options);
  // The keys parse() reads, for the fields that differ from the defaults: parse(to_options())
  // gives these options back, and a default struct gives an empty map. device_memory_bytes is
  // written as device_memory_mb (exact below 2^53 bytes); cuda_graphs, a key with no field, is
  // never written (only its default, false, is valid).
  PluginOptions to_options() const;

  static constexpr const char* kPluginName = "gemini";
};

}  // namespace colo
