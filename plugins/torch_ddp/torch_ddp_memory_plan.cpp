// TorchDdpPlugin::plan_memory: every rank holds the whole model (memory_planning's replicated engine).
#include <colo/booster/memory_plan.h>
#include <fmt/format.h>

#include "torch_ddp_plugin.h"

namespace colo::plugins {

MemoryPlan TorchDdpPlugin::plan_memory(const PluginOptions& given, const MemoryPlanInputs& in) {
  const auto o = TorchDdpOptions::parse(given);
  memory_planning::ReplicatedEngine engine;
  engine.precision = o.precision;
  engine.master_weights = o.master_weights;
  engine.bucket_cap_mb = o.bucket_cap_mb;
  engine.gradient_as_bucket_view = o.gradient_as_bucket_view;
  engine.optimizer_states = in.optimizer_states();
  const auto params = memory_planning::rank_parameters(in.model, 0, in.model.layers.size());
  RankMemory rank;
  rank.ranks = in.world_size() == 1 ? "0" : fmt::format("0-{}", in.world_size() - 1);
  rank.parts = memory_planning::replicated_engine_parts(params.trainable, params.frozen, engine);
  std::vector<std::string> unknown;
  rank.parts.push_back({fmt::format("activations (batch {}{})", MemoryPlan::samples_per_pass(in, in.world_size()),
                                    in.activation_checkpointing() ? ", checkpointed" : ""),
                        memory_planning::activation_bytes(in.model, 0, in.model.layers.size(), MemoryPlan::samples_per_pass(in, in.world_size()),
                                                          amp::to_dtype(o.precision), in.activation_checkpointing(), 1,
                                                          false, &unknown),
                        false, true});
  MemoryPlan plan;
  plan.plugin = "torch_ddp";
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
