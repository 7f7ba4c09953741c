// LowLevelZeroPlugin::plan_memory: ZeRO-1/2 over the world (memory_planning's ZeRO engine).
#include <colo/booster/memory_plan.h>
#include <fmt/format.h>

#include "low_level_zero_plugin.h"

namespace colo::plugins {

MemoryPlan LowLevelZeroPlugin::plan_memory(const PluginOptions& given, const MemoryPlanInputs& in) {
  const auto o = LowLevelZeroOptions::parse(given).zero;
  memory_planning::ZeroEngine engine;
  engine.stage = o.stage;
  engine.precision = o.precision;
  engine.bucket_cap_mb = o.bucket_cap_mb;
  engine.cpu_offload = o.cpu_offload;
  engine.communication_dtype = o.communication_dtype;
  engine.dp = in.world_size();
  engine.optimizer_states = in.optimizer_states();
  engine.device_is_gpu = in.device_is_gpu();
  const auto params = memory_planning::rank_parameters(in.model, 0, in.model.layers.size());
  RankMemory rank;
  rank.ranks = in.world_size() == 1 ? "0" : fmt::format("0-{}", in.world_size() - 1);
  rank.parts = memory_planning::zero_engine_parts(params.trainable, params.frozen, engine);
  if (in.accumulation_steps() > 1) {
    int64_t trainable = 0;
    for (auto n : params.trainable) trainable += n;
    if (o.stage == 2) {
      rank.parts.push_back({"gradients kept whole for accumulation", memory_planning::bytes(trainable, amp::to_dtype(o.precision)),
                            false, true});
    }
  }
  std::vector<std::string> unknown;
  rank.parts.push_back({fmt::format("activations (batch {}{})", MemoryPlan::samples_per_pass(in, in.world_size()),
                                    in.activation_checkpointing() ? ", checkpointed" : ""),
                        memory_planning::activation_bytes(in.model, 0, in.model.layers.size(), MemoryPlan::samples_per_pass(in, in.world_size()),
                                                          amp::to_dtype(o.precision), in.activation_checkpointing(), 1,
                                                          false, &unknown),
                        false, true});
  MemoryPlan plan;
  plan.plugin = "low_level_zero";
  plan.options = memory_planning::options_text(given);
  plan.world_size = in.world_size();
  plan.ranks.push_back(std::move(rank));
  if (!unknown.empty()) {
    plan.notes.push_back(fmt::format("no activation footprint for {} layer(s) (counted as 0), e.g. {}", unknown.size(),
                                     unknown.front()));
  }
  return plan;
}

}  // namespace colo::plugins
