// LowLevelZeroPlugin::plan_memory: ZeRO-1/2 over the world (memory_planning's ZeRO engine).
#include <colo/booster/memory_plan.h>
#include <fmt/format.h>

#include "low_level_zero_plugin.h"

namespace colo::plugins {

MemoryPlan LowLevelZeroPlugin::plan_memory(const PluginOptions& given, const MemoryPlanInputs& in) {
  const auto o = LowLevelZeroOptions::parse(given).zero();
  memory_planning::ZeroEngine engine;
  engine.stage = o.stage();
  engine.precision = o.precision();
  engine.bucket_cap_mb = o.bucket_cap_mb();
  engine.cpu_offload = o.cpu_offload();
  engine.communication_dtype = o.communication_dtype();
  engine.dp = in.world_size();
  engine.optimizer_states = in.optimizer_states();
  engine.device_is_gpu = in.device_is_gpu();
  const auto params = memory_planning::rank_parameters(in.model, 0, in.model.layers.size());
  auto parts = memory_planning::zero_engine_parts(params.trainable, params.frozen, engine);
  if (in.keeps_gradients_between_passes() && o.stage() == 2) {  // stage 1's gradients stay in the all-reduce buckets
    int64_t trainable = 0;
    for (auto n : params.trainable) trainable += n;
    parts.push_back({"gradients kept whole for accumulation", memory_planning::bytes(trainable, amp::to_dtype(o.precision())),
                     false, true});
  }
  return memory_planning::data_parallel_plan("low_level_zero", given, in, std::move(parts), o.precision());
}

}  // namespace colo::plugins
