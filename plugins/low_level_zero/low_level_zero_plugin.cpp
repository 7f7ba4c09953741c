#include "low_level_zero_plugin.h"

#include <colo/booster/plugin_info.h>
#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/engine/data_parallel.h>
#include <colo/engine/parallelize.h>

#include <stdexcept>

namespace colo::plugins {

LowLevelZeroPlugin::LowLevelZeroPlugin(const PluginOptions& options, const PluginContext& context)
    : Plugin(context), options_(LowLevelZeroOptions::parse(options)) {
  if (!context_.world) {
    throw std::invalid_argument("low_level_zero needs the job's world process group in its PluginContext");
  }
  context_.mesh = std::make_shared<dist::ProcessGroupMesh>(context_.world, dist::dp_pp_tp_shape(context_.world->size(), 1, 1));
}

Boosted LowLevelZeroPlugin::boost(BoostInputs inputs) {
  if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
    throw std::invalid_argument("low_level_zero boost: the model, the optimizer and the criterion are required");
  }
  const auto zero = DataParallelOptions()
                        .zero_stage(options_.zero().stage())
                        .caller("low_level_zero")
                        .zero(options_.zero());
  check_data_parallel_optimizer(*inputs.optimizer, zero);  // before anything changes
  const auto& world = context_.world;

  // 1.
  if (inputs.dataloader) shard_dataloader(*inputs.dataloader, *world, name());

  // 2.
  auto model = inputs.model;
  broadcast_model(*model, context_.device, *world);
  apply_matmul_precision(*model, options_.zero().precision(), context_.device);

  // 3. ZeRO-1/2 over the world: LowLevelZeroModel and ZeroOptimizer.
  const auto engine = apply_data_parallel(model, inputs.optimizer, world, zero);
  return {engine->model(), engine->optimizer(), inputs.criterion, inputs.dataloader, inputs.lr_scheduler, context_.mesh};
}

}  // namespace colo::plugins

COLO_PLUGIN(low_level_zero, "0.1.0", colo::plugins::LowLevelZeroPlugin)
