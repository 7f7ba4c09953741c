#include "gemini_plugin.h"

#include <colo/booster/data_parallel_recipe.h>
#include <colo/booster/plugin_info.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/engine/data_parallel.h>

#include <stdexcept>

#include "gemini_checkpoint_io.h"

namespace colo::plugins {

GeminiPlugin::GeminiPlugin(const PluginOptions& options, const PluginContext& context)
    : Plugin(context), options_(GeminiOptions::parse(options)) {
  if (!context_.world) throw std::invalid_argument("gemini needs the job's world process group in its PluginContext");
  context_.mesh =
      std::make_shared<dist::ProcessGroupMesh>(context_.world, dist::dp_pp_tp_shape(context_.world->size(), 1, 1));
}

CheckpointIO& GeminiPlugin::checkpoint_io() {
  if (!checkpoint_io_) checkpoint_io_ = std::make_unique<GeminiCheckpointIO>(context_.world);
  return *checkpoint_io_;
}

// gemini's chunks over the world (zero_stage 3): the GeminiChunkOwner, held by the model half
// (GeminiModel) and borrowed by the optimizer half (GeminiOptimizer).
Boosted GeminiPlugin::boost(BoostInputs inputs) {
  const auto chunked =
      DataParallelOptions().zero_stage(3).caller(name()).chunks(options_.chunks()).gemini(options_.optimizer());
  return boost_data_parallel(*this, std::move(inputs), chunked, options_.chunks().precision(), options_.fp8());
}

}  // namespace colo::plugins

COLO_PLUGIN(gemini, "0.1.0", colo::plugins::GeminiPlugin)
