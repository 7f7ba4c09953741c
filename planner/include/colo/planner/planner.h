#pragma once

#include <colo/planner/step_model.h>

#include <optional>
#include <string>
#include <vector>

namespace colo::planner {

// Every layout the plugins accept for the request's model, global batch and world
// (PlanRequest's search options bound it):
//   torch_ddp          dp = world; accumulation passes; activation checkpointing
//   low_level_zero     stage 1 or 2, with or without cpu_offload; accumulation; checkpointing
//   gemini             static, static with the optimizer state offloaded, auto; accumulation;
//                      checkpointing
//   hybrid_parallel    every tp dividing the world (within a node, dividing the heads and MLP
//                      width) and pp dividing the rest (at most the layers); sequence parallelism;
//                      zero stage 0/1/2 (offload with 1/2); at pp 1 without or with microbatches;
//                      at pp > 1 every schedule of pipeline::builtin_schedules() (GPipe, 1F1B,
//                      interleaved with each chunk count asked for, zero bubble) whose rules
//                      allow the shape, microbatches dividing the per-rank batch (>= pp, at most
//                      max_microbatches); checkpointing
// Layouts whose batch does not divide are left out (structural_problem says why for one given).
std::vector<Layout> enumerate_layouts(const PlanRequest& request);

// A layout the planner set aside, and why (it does not fit, or the plugin rejects it).
struct Rejected {
  Layout layout;
  std::string reason;
  int64_t device_bytes = 0;  // what it would need (0 when the plugin rejected it)
};

struct PlanResult {
  std::vector<Prediction> ranked;  // those that fit, by predicted images/s, best first
  std::vector<Rejected> rejected;
  int enumerated = 0;
  double seconds = 0;  // the search's own time
};

// Enumerates, predicts, drops what does not fit and ranks the rest (the library API behind
// colo-plan; docs/planning.md). Never throws for a layout; throws NoLayoutFits when none fits,
// saying how much memory per GPU, or how many GPUs, would do.
PlanResult plan_layouts(const PlanRequest& request);
// The same over a model made already (its summary is the slow part for a large model).
PlanResult plan_layouts(const StepModel& model);

class NoLayoutFits : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The train_vit --config file (examples/configs) that runs `prediction`'s layout for the request,
// as JSON text: the plugin, precision, parallel layout and plugin options, the model, the batch.
std::string train_vit_config(const Prediction& prediction, const PlanRequest& request);

}  // namespace colo::planner
