#include "gemini_plugin.h"

#include <colo/booster/plugin_info.h>
#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/engine/data_parallel.h>
#include <colo/engine/parallelize.h>

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

Boosted GeminiPlugin::boost(BoostInputs inputs) {
  if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
    throw std::invalid_argument("gemini boost: the model, the optimizer and the criterion are required");
  }
  const auto chunked = DataParallelOptions()
                           .zero_stage(3)
                           .caller("gemini")
                           .chunks(options_.chunks())
                           .gemini(options_.optimizer());
  check_data_parallel_optimizer(*inputs.optimizer, chunked);  // before anything changes
  const auto& world = context_.world;
  // 1.
  if (inputs.dataloader) shard_dataloader(*inputs.dataloader, *world, name());
  // 2.
  auto model = inputs.model;
  broadcast_model(*model, context_.device, *world);
  apply_matmul_precision(*model, options_.chunks().precision(), context_.device);
  // 3. The chunks (GeminiChunkOwner), held by the model half (GeminiModel), stepped by GeminiOptimizer.
  const auto engine = apply_data_parallel(model, inputs.optimizer, world, chunked);
  return {engine->model(), engine->optimizer(), inputs.criterion, inputs.dataloader, inputs.lr_scheduler, context_.mesh};
}

}  // namespace colo::plugins

COLO_PLUGIN(gemini, "0.1.0", colo::plugins::GeminiPlugin)
