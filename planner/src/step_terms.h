#pragma once
// The step model's parts shared by the plain and the pipelined step (step_model.cpp,
// plain_step.cpp, pipeline_step.cpp).

#include <colo/pipeline/program.h>
#include <colo/pipeline/schedule.h>
#include <colo/planner/step_model.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <string>
#include <vector>

#include "layer_costs.h"

namespace colo::planner {

// What a StepModel computes once: parameter counts per layer, and each schedule shape's lowered
// programs (lowering is the slow part of a simulation, and the same shape recurs across layouts).
struct StepModel::Caches {
  // Trainable elements per layer of the stack: the part tensor parallelism splits, and the rest.
  std::vector<double> split_params;
  std::vector<double> whole_params;

  struct Lowered {
    pipeline::Schedule schedule;
    std::vector<pipeline::RankProgram> programs;
  };
  std::shared_ptr<const Lowered> lowered(const std::string& schedule, int pp, int microbatches, int chunks);

 private:
  std::mutex mutex_;
  std::map<std::tuple<std::string, int, int, int>, std::shared_ptr<const Lowered>> lowered_;
};

namespace detail {

void fill_parameter_counts(const nn::ModelSummary& summary, StepModel::Caches& caches);
// Trainable elements one rank holds of layers [begin, end) under tensor parallelism over tp.
double rank_parameters(const StepModel::Caches& caches, int begin, int end, int tp);

// The optimizer step and the copies of offloaded state for `elements` fp32 elements on this
// rank, `host_elements` of them in host memory.
struct OptimizerTerms {
  double optimizer = 0;
  double offload = 0;
};
OptimizerTerms optimizer_terms(const PlanRequest& request, double elements, double host_elements,
                               double element_bytes);
// Elements of optimizer state a memory plan puts in host memory (the largest of any rank).
double host_state_elements(const MemoryPlan* plan, int optimizer_states);

Breakdown plain_step(const PlanRequest& request, const Layout& layout, const LayerCosts& costs, const MemoryPlan* plan,
                     StepModel::Caches& caches);
Breakdown pipelined_step(const PlanRequest& request, const Layout& layout, const LayerCosts& costs,
                         const MemoryPlan* plan, StepModel::Caches& caches);

// The plugins' gradient buckets (bucket_cap_mb's default, 25 MiB).
inline constexpr double kBucketBytes = 25.0 * 1024 * 1024;

}  // namespace detail
}  // namespace colo::planner
