// One pipelined hybrid_parallel step: per virtual stage, its layers' costs (tensor-parallel
// collectives inside, the send of its output after each forward, of its input gradient after
// each backward); the schedule's timeline from core/pipeline's simulator with those per-stage
// costs; then, per rank, what follows its last backward: the data-parallel reduction (one, after
// the last backward: exposed), the optimizer step and, under ZeRO, the all-gather of the updated
// weights, which the next step waits for before its first forward (exposed too).
#include <colo/pipeline/partition.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/simulator.h>
#include <colo/pipeline/stage_manager.h>
#include <colo/planner/collective_model.h>

#include <algorithm>
#include <cmath>

#include "step_terms.h"

namespace colo::planner {

std::shared_ptr<const StepModel::Caches::Lowered> StepModel::Caches::lowered(const std::string& schedule, int pp,
                                                                             int microbatches, int chunks) {
  const auto key = std::make_tuple(schedule, pp, microbatches, chunks);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = lowered_.find(key);
    if (it != lowered_.end()) return it->second;
  }
  auto made_schedule =
      pipeline::builtin_schedules().make(schedule, pipeline::ScheduleShape(pp, microbatches).chunks(chunks));
  auto programs = pipeline::lower(made_schedule);
  auto made = std::make_shared<const Lowered>(Lowered{std::move(made_schedule), std::move(programs)});
  std::lock_guard<std::mutex> lock(mutex_);
  return lowered_.emplace(key, made).first->second;
}

namespace detail {

Breakdown pipelined_step(const PlanRequest& r, const Layout& l, const LayerCosts& costs, const MemoryPlan* plan,
                         StepModel::Caches& caches) {
  const auto& cluster = r.cluster;
  const int m = l.microbatches;
  const int stages = l.pp * l.chunks;
  const int64_t samples = r.global_batch / (static_cast<int64_t>(l.dp) * m);
  // The plugin's own cut (its default, uniform): the same function's options.
  const auto ranges = pipeline::partition_layers(
      costs.num_layers(), stages,
      pipeline::stack_partition_options(pipeline::PartitionMethod::kUniform, costs.num_layers(), stages));
  const auto lowered = caches.lowered(l.schedule, l.pp, m, l.chunks);
  const bool split = lowered->schedule.split_backward;
  const double send = collective_seconds(cluster, Collective::kSendRecv, costs.boundary_bytes(samples),
                                         pp_group(l.pp, l.tp, cluster.gpus_per_node));

  std::vector<PassCosts> pass(stages);
  std::vector<pipeline::StageCosts> per_stage(stages);
  for (int s = 0; s < stages; ++s) {
    pass[s] = costs.range(ranges[s].begin, ranges[s].end, samples);
    const auto& p = pass[s];
    auto& c = per_stage[s];
    // Never zero: the simulator needs positive costs (a stage of no work still takes a moment).
    constexpr double kTiny = 1e-9;
    c.forward = std::max(kTiny, p.forward + p.tp_forward + (s + 1 < stages ? send : 0.0));
    c.backward = std::max(kTiny, p.backward + p.tp_backward + (s > 0 ? send : 0.0));
    c.input_grad = std::max(kTiny, p.input_grad + p.tp_backward + (s > 0 ? send : 0.0));
    c.weight_grad = std::max(kTiny, p.weight_grad);
  }
  const auto timeline =
      pipeline::simulate(lowered->schedule, lowered->programs, pipeline::ActionCosts().per_stage(per_stage));

  const auto dp = dp_group(l.dp, l.pp, l.tp, cluster.gpus_per_node);
  const double host_elements = host_state_elements(plan, r.optimizer_states);
  Breakdown worst;
  double worst_total = -1;
  for (int rank = 0; rank < l.pp; ++rank) {
    const pipeline::StageManager manager(l.pp, rank, l.chunks);
    Breakdown b;
    double params = 0;
    for (int c = 0; c < l.chunks; ++c) {
      const int s = manager.stage(c);
      const auto& p = pass[s];
      b.compute += m * (p.forward + (split ? p.input_grad + p.weight_grad : p.backward));
      b.recompute += m * p.recompute;
      b.tp_comm += m * (p.tp_forward + p.tp_backward);
      b.pp_comm += m * ((s + 1 < stages ? send : 0.0) + (s > 0 ? send : 0.0));
      params += rank_parameters(caches, ranges[s].begin, ranges[s].end, l.tp);
    }
    const auto& t = timeline.ranks[rank];
    b.bubble = std::max(0.0, t.finish - t.busy);
    const double bytes = params * costs.element_bytes();
    // ZeRO-2 reduce-scatters its gradients and all-gathers its weights once a step; so does ZeRO-3
    // under a pipeline (the stage's chunks gathered once for the step: PipelineModel).
    if (l.zero_stage >= 2) {
      b.dp_comm = bucketed_seconds(cluster, Collective::kReduceScatter, bytes, kBucketBytes, dp);
    } else {
      b.dp_comm = bucketed_seconds(cluster, Collective::kAllReduce, bytes, kBucketBytes, dp);
    }
    double elements = params;
    if (l.zero_stage > 0) {
      b.dp_comm += bucketed_seconds(cluster, Collective::kAllGather, bytes, kBucketBytes, dp);
      elements = std::ceil(params / l.dp);
    }
    const auto opt = optimizer_terms(r, elements, l.cpu_offload ? elements : host_elements, costs.element_bytes());
    b.optimizer = opt.optimizer;
    b.offload = opt.offload;
    if (b.total() > worst_total) {
      worst_total = b.total();
      worst = b;
    }
  }
  return worst;
}

}  // namespace detail
}  // namespace colo::planner
