// TorchDdpPlugin::plan_memory: every rank holds the whole model (memory_planning's replicated engine).
#include <colo/booster/memory_plan.h>
#include <fmt/format.h>

#include "torch_ddp_plugin.h"

namespace colo::plugins {

MemoryPlan TorchDdpPlugin::plan_memory(const PluginOptions& given, const MemoryPlanInputs& in) {
  const auto o = TorchDdpOptions::parse(given);
  memory_planning::ReplicatedEngine engine;
  engine.precision = o.precision();
  engine.master_weights = o.master_weights();
  engine.bucket_cap_mb = o.bucket_cap_mb();
  engine.gradient_as_bucket_view = o.gradient_as_bucket_view();
  engine.optimizer_states = in.optimizer_states();
  const auto params = memory_planning::rank_parameters(in.model, 0, in.model.layers.size());
  return memory_planning::data_parallel_plan("torch_ddp", given, in,
                                             memory_planning::replicated_engine_parts(params.trainable, params.frozen, engine),
                                             o.precision());
}

}  // namespace colo::plugins
