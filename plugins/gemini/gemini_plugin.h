#pragma once

#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/plugins/gemini_options.h>

#include <memory>
#include <string>

namespace colo::plugins {

// ZeRO stage 3 with chunks and heterogeneous memory (Colossal-AI's GeminiPlugin) over the world
// as the data-parallel group: parameters, gradients and optimizer state are all sharded; a
// layer's parameters exist in full only while the layer runs (forward, and again in backward).
// The optimizer must be Adam-like (torch's Adam / AdamW, colo's HybridAdam).
//
// boost(), in order:
//   1. the data loader is re-sharded over the world;
//   2. the model moves to the context's device; parameters and buffers are broadcast from rank 0;
//   3. a GeminiChunkOwner chunks the parameters and places each chunk's state (see its order);
//   4. the model is wrapped around it (GeminiModel: gathers and releases chunks layer by layer)
//      and the optimizer borrows it (GeminiOptimizer: steps each chunk's state where it lives).
// no_sync works: gradients accumulate in param.grad (full size, with the chunks kept gathered
// until the next forward) and the next synchronised backward reduce-scatters their sum.
class GeminiPlugin : public Plugin {
 public:
  GeminiPlugin(const PluginOptions& options, const PluginContext& context);

  std::string name() const override { return "gemini"; }
  const GeminiOptions& options() const { return options_; }

  Boosted boost(BoostInputs inputs) override;
  // Chunk by chunk (GeminiCheckpointIO): never a second full copy of the model or its state.
  CheckpointIO& checkpoint_io() override;

  // What gemini would hold on each rank (see Booster::plan_memory); gemini_memory_plan.cpp.
  static MemoryPlan plan_memory(const PluginOptions& options, const MemoryPlanInputs& inputs);

 private:
  GeminiOptions options_;
  std::unique_ptr<CheckpointIO> checkpoint_io_;
};

}  // namespace colo::plugins
