#include "gemini_plugin.h"

#include <colo/engine/parallelize.h>
#include <colo/booster/plugin_info.h>
#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>

#include <stdexcept>

#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/gemini_model.h>
#include <colo/engine/gemini_optimizer.h>

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
  GeminiOptimizer::check_optimizer(*inputs.optimizer, "gemini");  // before anything changes
  const auto& world = context_.world;
  // 1.
  if (inputs.dataloader) shard_dataloader(*inputs.dataloader, *world, name());
  // 2.
  auto model = inputs.model;
  broadcast_model(*model, context_.device, *world);
  apply_matmul_precision(*model, options_.chunks().precision(), context_.device);
  // 3.
  auto chunks = std::make_shared<GeminiChunkOwner>(model, inputs.optimizer, world, options_.chunks());
  // 4.
  auto wrapped = std::make_shared<GeminiModel>(chunks);
  auto optimizer = std::make_shared<GeminiOptimizer>(inputs.optimizer, chunks, options_.optimizer());
  return {wrapped, optimizer, inputs.criterion, inputs.dataloader, inputs.lr_scheduler, context_.mesh};
}

}  // namespace colo::plugins

COLO_PLUGIN(gemini, "0.1.0", colo::plugins::GeminiPlugin)
