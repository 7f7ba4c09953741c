#pragma once

#include <colo/booster/memory_plan.h>
#include <colo/planner/cluster.h>
#include <colo/planner/layout.h>
#include <colo/planner/model.h>
#include <colo/planner/profile.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colo::planner {

// What to plan for: a model, a job (world, global batch, precision), the cluster and, when one
// was measured, the per-layer profile; and how wide to search (planner.h).
struct PlanRequest {
  ModelSpec model;
  int world_size = 1;
  int64_t global_batch = 1;
  std::string precision = "bf16";
  ClusterSpec cluster;
  // Measured per-layer costs; without one, compute is analytic (FLOPs at the cluster's matmul
  // efficiency, the rest at its memory bandwidth).
  std::optional<CostProfile> profile;
  // fp32 values per element the optimizer keeps besides the master (AdamW: 2).
  int optimizer_states = 2;

  // The search (enumerate_layouts): which plugins, how many microbatches and accumulation passes
  // at most, the interleaved schedule's chunk counts, and whether to try offloaded state.
  std::vector<std::string> plugins = {"torch_ddp", "low_level_zero", "gemini", "hybrid_parallel"};
  int max_microbatches = 64;
  int max_grad_accum = 16;
  std::vector<int> interleaved_chunks = {2};
  bool include_offload = true;
};

// Where one step's time goes on the rank that finishes last; the terms add up to the step.
struct Breakdown {
  double compute = 0;    // forward and backward of the rank's layers, recomputation included
  double recompute = 0;  // of which: forwards recomputed under activation checkpointing
  double tp_comm = 0;    // tensor-parallel collectives (on the critical path)
  double pp_comm = 0;    // pipeline sends and receives
  double dp_comm = 0;    // data-parallel gradient reduction and weight gathering not hidden
  double bubble = 0;     // pipeline idle time
  double optimizer = 0;  // the optimizer step (device and host)
  double offload = 0;    // host <-> device copies not hidden
  // The plugin's own work around the layers (gemini's chunks, ZeRO's flat buffers): the profile's
  // plugin_overheads per parameter × the parameters the rank holds whole; 0 where not measured.
  double plugin_work = 0;
  double total() const { return compute + tp_comm + pp_comm + dp_comm + bubble + optimizer + offload + plugin_work; }
};

struct Prediction {
  Layout layout;
  double step_seconds = 0;
  double images_per_second = 0;
  double tflops_per_gpu = 0;
  double mfu = 0;  // model FLOPs (model.h) over the cluster's peak for the precision
  // Booster::plan_memory's peak per rank (the largest of any rank) and what it can use.
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
  int64_t usable_device_bytes = 0;
  bool fits = true;
  std::string why_not;  // when it does not fit: which rank needs what
  Breakdown breakdown;
  std::string bound;  // the largest term, in words
  std::vector<std::string> notes;
};

// The performance model (docs/planning.md): per-layer costs from the profile (or analytic), the
// collectives from the cluster's constants with each plugin's overlap, the pipeline's timeline
// from core/pipeline's simulator fed with per-stage costs, memory from Booster::plan_memory.
class StepModel {
 public:
  // Throws std::invalid_argument for a request that cannot be modelled (a profile of another
  // model or precision, no peak for the precision, a world or batch below 1).
  explicit StepModel(PlanRequest request);
  ~StepModel();
  StepModel(StepModel&&) noexcept;

  const PlanRequest& request() const { return request_; }
  const nn::ModelSummary& summary() const { return summary_; }

  // What Booster::plan_memory is asked for this layout (the same inputs train_vit --dry-run
  // gives it).
  MemoryPlanInputs memory_inputs(const Layout& layout) const;
  // Booster::plan_memory for the layout. Throws the plugin's std::invalid_argument when it
  // rejects the options.
  MemoryPlan memory_plan(const Layout& layout) const;

  // The whole prediction: time and memory. Throws std::invalid_argument for a layout the
  // plugins do not accept for this model and batch (saying why).
  Prediction predict(const Layout& layout) const;
  // Time only, with a memory plan made already (or none: no offloaded state assumed).
  Prediction predict_time(const Layout& layout, const MemoryPlan* plan) const;

  // Why a layout cannot run this model and batch at all (before any plugin is asked): empty
  // when it can.
  std::string structural_problem(const Layout& layout) const;

  // What the model computes once and reuses across layouts (planner/src/step_terms.h).
  struct Caches;

 private:
  PlanRequest request_;
  nn::ModelSummary summary_;
  std::unique_ptr<Caches> caches_;
};

// A few lines: the layout, step time, images/s, MFU, memory and the breakdown with the bound
// (colo-plan --explain).
std::string explain(const Prediction& p, const PlanRequest& request);

}  // namespace colo::planner
