#include "low_level_zero_plugin.h"

#include <colo/booster/data_parallel_recipe.h>
#include <colo/booster/plugin_info.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/engine/data_parallel.h>

#include <stdexcept>

namespace colo::plugins {

LowLevelZeroPlugin::LowLevelZeroPlugin(const PluginOptions& options, const PluginContext& context)
    : Plugin(context), options_(LowLevelZeroOptions::parse(options)) {
  if (!context_.world) {
    throw std::invalid_argument("low_level_zero needs the job's world process group in its PluginContext");
  }
  context_.mesh = std::make_shared<dist::ProcessGroupMesh>(context_.world, dist::dp_pp_tp_shape(context_.world->size(), 1, 1));
}

// ZeRO-1/2 over the world: ZeroOptimizer (flat fp32 master shards and Adam state per rank) and
// LowLevelZeroModel (the updated weights gathered, overlapped with the next forward).
Boosted LowLevelZeroPlugin::boost(BoostInputs inputs) {
  const auto zero = DataParallelOptions().zero_stage(options_.zero().stage()).caller(name()).zero(options_.zero());
  return boost_data_parallel(*this, std::move(inputs), zero, options_.zero().precision(), options_.fp8());
}

}  // namespace colo::plugins

COLO_PLUGIN(low_level_zero, "0.1.0", colo::plugins::LowLevelZeroPlugin)
