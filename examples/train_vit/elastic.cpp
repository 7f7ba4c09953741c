#include "elastic.h"

#include <colo/engine/parallelize.h>
#include <colo/env/elastic.h>
#include <fmt/format.h>

namespace train_vit {

ElasticRun elastic_run(const colo::dist::Environment& env) {
  ElasticRun run;
  run.world = env.world_size;
  std::optional<int> planned;
  try {
    planned = colo::env::elastic_max_world();
  } catch (const colo::env::VariableError& e) {
    throw UsageError(e.what());
  }
  run.planned_world = planned.value_or(env.world_size);
  if (run.planned_world < run.world) {
    throw UsageError(fmt::format("{}={} is smaller than the world of {} ranks this run was started with; it is "
                                 "colo-run --elastic's to set",
                                 colo::env::kElasticMaxWorldVariable, run.planned_world, run.world));
  }
  return run;
}

void throw_layout_error(const ElasticRun& elastic, const std::string& message) {
  if (!elastic.shrunk()) throw UsageError(message);
  throw WorldSizeUnusable(fmt::format("on {} of the planned {} ranks (colo-run --elastic): {}", elastic.world,
                                      elastic.planned_world, message));
}

int64_t elastic_grad_accum(const TrainOptions& o, const ElasticRun& elastic, int64_t dp_size, bool pipelined,
                           std::vector<std::string>& notes) {
  if (!elastic.shrunk()) return o.grad_accum;
  // Pipeline and tensor-parallel ranks (world / dp of them per replica) stay as planned: only the
  // data-parallel axis shrinks.
  const int64_t per_replica = elastic.world / dp_size;
  if (elastic.planned_world % per_replica != 0) {
    throw_layout_error(elastic, fmt::format("the planned world of {} ranks does not hold replicas of {} ranks",
                                            elastic.planned_world, per_replica));
  }
  const int64_t planned_dp = elastic.planned_world / per_replica;
  if (pipelined) {
    if (o.batch_size % dp_size != 0) {
      throw_layout_error(elastic, fmt::format("--batch-size {} does not split over {} data-parallel ranks",
                                              o.batch_size, dp_size));
    }
    notes.push_back(fmt::format(
        "elastic: {} of {} ranks: data-parallel {} instead of {}; each pipeline takes {} images a step instead of {} "
        "(the global batch {} stays)",
        elastic.world, elastic.planned_world, dp_size, planned_dp, o.batch_size / dp_size, o.batch_size / planned_dp,
        o.batch_size));
    return o.grad_accum;
  }
  const auto accumulation = colo::accumulation_keeping_global_batch(o.batch_size, dp_size, planned_dp, o.grad_accum);
  if (!accumulation) {
    throw_layout_error(elastic, fmt::format("--batch-size {} does not split over {} data-parallel ranks",
                                            o.batch_size, dp_size));
  }
  notes.push_back(fmt::format(
      "elastic: {} of {} ranks: data-parallel {} instead of {}; gradient accumulation {} instead of {} keeps the global "
      "batch {} ({} images per rank per pass, planned {})",
      elastic.world, elastic.planned_world, dp_size, planned_dp, *accumulation, o.grad_accum, o.batch_size,
      o.batch_size / (dp_size * *accumulation), o.batch_size / (planned_dp * o.grad_accum)));
  return *accumulation;
}

}  // namespace train_vit
