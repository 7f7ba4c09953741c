#pragma once

#include <colo/pipeline/action.h>
#include <torch/arg.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace colo::pipeline {

// The size of a pipeline: `pp` ranks, each holding `chunks` model chunks (virtual stages
// c * pp + r, see Action), and `microbatches` per step.
struct ScheduleShape {
  ScheduleShape(int pp, int microbatches) : pp_(pp), microbatches_(microbatches) {}
  // Virtual stages: pp * chunks.
  int num_stages() const { return pp_ * chunks_; }

  TORCH_ARG(int, pp);
  TORCH_ARG(int, microbatches);
  // Model chunks per rank; above 1 only for a schedule that interleaves chunks (ScheduleEntry::supports_chunks).
  TORCH_ARG(int, chunks) = 1;
};

// A schedule, or the program lowered from one, that cannot run: invalid, deadlocking, or sending
// one microbatch's data where the receiver expects another's.
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A schedule is data: per pp rank, the actions it computes, in execution order. Generators
// (schedule_generators.h) make them, validate() checks one, lower() (program.h) adds the
// communication and simulate() (simulator.h) runs it dry.
struct Schedule {
  // One empty action list per rank.
  explicit Schedule(ScheduleShape s) : shape(s), actions(static_cast<std::size_t>(std::max(s.pp(), 0))) {}

  ScheduleShape shape;
  // True when the backward pass is split (zero bubble): every (stage, microbatch) then has a B
  // that computes the input gradient only and a W that computes the weight gradient.
  bool split_backward = false;
  // True for an evaluation schedule: forwards only (no B, no W), one per (stage, microbatch).
  bool forward_only = false;
  // actions[r]: pp rank r's actions in execution order.
  std::vector<std::vector<Action>> actions;

  int pp() const { return shape.pp(); }
  int num_stages() const { return shape.num_stages(); }
  int rank_of(int stage) const { return stage % shape.pp(); }
};

// "pp=4, microbatches=8, chunks=2": the shape as error messages name it.
std::string describe(const ScheduleShape& shape);

// `problems` as an indented list for an error message, one per line; past the first 20, a count.
std::string list_problems(const std::vector<std::string>& problems);

// The rules every shape obeys, each broken one saying what to change (empty when none): pp,
// microbatches and chunks at least 1. A schedule's own rules: ScheduleRegistry::shape_problems().
std::vector<std::string> basic_shape_problems(const ScheduleShape& shape);

// The most microbatches that virtual stage `stage` holds at once (forwarded, B not run yet),
// following its rank's actions in order: 1F1B's stage r holds min(pp - r, m), GPipe's m. A
// CUDA-graphed stage needs that many capture slots (nn::CudaGraphOptions::max_in_flight).
// 0 for a forward-only schedule or a stage out of range.
int peak_in_flight(const Schedule& schedule, int stage);

// Checks that `schedule` computes everything exactly once, where and in the order it must:
//   - a sane shape (pp, microbatches, chunks >= 1; chunks > 1 needs pp >= 2, or consecutive
//     stages would share a rank) and one action list per pp rank;
//   - every action's stage and microbatch in range, on the rank that owns the stage;
//   - every (stage, microbatch) has exactly one F and one B, and one W if and only if the
//     schedule splits the backward (a forward-only schedule: one F, nothing else);
//   - on that rank, F before B before W.
// It does not check that the ranks' orders fit together (rank 0 waiting for a gradient that rank 1
// computes only after an activation that rank 0 sends after that gradient): such a schedule
// deadlocks, which simulate() detects.
// Throws ScheduleError listing the problems (the first 20, and how many more).
void validate(const Schedule& schedule);

// One thing validate() finds wrong, with the rank whose action list holds it, so that a schedule
// read from text can point at the line (schedule_text.h).
struct ScheduleProblem {
  // As validate() lists it: "rank 1 action 3 (1F2): microbatch 2 is out of range [0, 2)".
  std::string message;
  // The rank whose actions it concerns (a missing action: the rank that should run it); -1 for
  // the schedule as a whole (its shape, its number of action lists).
  int rank = -1;
};
// What validate() checks, as a list (empty: valid). When the shape itself is broken, only the
// shape's problems (nothing else means anything without it).
std::vector<ScheduleProblem> schedule_problems(const Schedule& schedule);

}  // namespace colo::pipeline
