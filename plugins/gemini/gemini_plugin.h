#pragma once

#include <colo/booster/plugin.h>

#include <string>

#include "gemini_options.h"

namespace colo::plugins {

// ZeRO stage 3 with chunks and heterogeneous memory (Colossal-AI's GeminiPlugin) over the world
// as the data-parallel group: parameters, gradients and optimizer state are all sharded; a
// layer's parameters exist in full only while the layer runs (forward, and again in backward).
// The optimizer must be Adam-like (torch's Adam / AdamW, colo's HybridAdam).
//
// boost(), in order:
//   1. the data loader is re-sharded over the world;
//   2. the model moves to the context's device; parameters and buffers are broadcast from rank 0;
//   3. the GeminiOptimizer chunks the parameters and places each chunk's state (see its order);
//   4. the model is wrapped (GeminiModel: gathers and releases chunks layer by layer).
// no_sync works: gradients accumulate in param.grad (full size, with the chunks kept gathered
// until the next forward) and the next synchronised backward reduce-scatters their sum.
class GeminiPlugin : public Plugin {
 public:
  GeminiPlugin(const PluginOptions& options, const PluginContext& context);

  std::string name() const override { return "gemini"; }
  const GeminiOptions& options() const { return options_; }

  Boosted boost(BoostInputs inputs) override;

 private:
  GeminiOptions options_;
};

}  // namespace colo::plugins
