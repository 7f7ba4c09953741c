#include "low_level_zero_plugin.h"

#include <colo/engine/parallelize.h>
#include <colo/booster/plugin_info.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/booster/precision_options.h>
#include <colo/data/data_loader.h>
#include <colo/ddp/broadcast_coalesced.h>
#include <colo/dist/process_group.h>
#include <colo/zero/grad_reducer.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include <colo/engine/low_level_zero_model.h>

namespace colo::plugins {

LowLevelZeroPlugin::LowLevelZeroPlugin(const PluginOptions& options, const PluginContext& context)
    : Plugin(context), options_(LowLevelZeroOptions::parse(options)) {
  if (!context_.world) {
    throw std::invalid_argument("low_level_zero needs the job's world process group in its PluginContext");
  }
  context_.mesh = std::make_shared<dist::ProcessGroupMesh>(context_.world, dist::MeshShape{context_.world->size(), 1, 1});
}

Boosted LowLevelZeroPlugin::boost(BoostInputs inputs) {
  if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
    throw std::invalid_argument("low_level_zero boost: the model, the optimizer and the criterion are required");
  }
  ZeroOptimizer::check_optimizer(*inputs.optimizer, "low_level_zero");  // before anything changes
  const auto& world = context_.world;

  // 1.
  if (inputs.dataloader) shard_dataloader(*inputs.dataloader, *world, name());

  // 2.
  auto model = inputs.model;
  broadcast_model(*model, context_.device, *world);
  apply_matmul_precision(*model, options_.zero().precision(), context_.device);

  // 3.
  auto optimizer = std::make_shared<ZeroOptimizer>(inputs.optimizer, model, world, options_.zero());

  // 4.
  auto wrapped = std::make_shared<LowLevelZeroModel>(model, optimizer);
  return {wrapped, optimizer, inputs.criterion, inputs.dataloader, inputs.lr_scheduler, context_.mesh};
}

}  // namespace colo::plugins

COLO_PLUGIN(low_level_zero, "0.1.0", colo::plugins::LowLevelZeroPlugin)
