#pragma once

#include <colo/pipeline/action_costs.h>
#include <colo/pipeline/program.h>
#include <colo/pipeline/schedule.h>

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace colo::pipeline {

// When one step started and ended. For a communication step, start is when the batch was posted
// and end when its last operation was matched (end - start is time spent waiting).
struct StepTiming {
  double start = 0;
  double end = 0;
};

// One rank's dry run.
struct RankTimeline {
  RankProgram program;
  // Parallel to program.steps.
  std::vector<StepTiming> steps;
  // Parallel to the rank's actions (Schedule::actions[rank]).
  std::vector<StepTiming> actions;
  // Time spent computing.
  double busy = 0;
  // When its last step ended.
  double finish = 0;
  // The most microbatches forwarded whose B has not run yet: the activations the rank holds (none
  // in a forward-only schedule). A
  // microbatch on one chunk counts once (interleaved: a chunk's activations, 1 / chunks of a
  // rank's share).
  int peak_in_flight = 0;
  // The most microbatches forwarded whose backward is not complete: B not run, or (zero bubble)
  // W not run, what the weight gradient needs still held. Equal to peak_in_flight when the
  // backward is not split.
  int peak_unfinished = 0;
};

struct SimulationResult {
  // When the last rank finished.
  double makespan = 0;
  std::vector<RankTimeline> ranks;

  // Idle time over all ranks' time: 1 - sum(busy) / (ranks * makespan).
  double bubble_fraction() const;
};

// simulate()'s error when no rank can make progress, with where each blocked rank stopped.
class ScheduleDeadlock : public ScheduleError {
 public:
  ScheduleDeadlock(const std::string& message, std::map<int, std::size_t> blocked)
      : ScheduleError(message), blocked_(std::move(blocked)) {}
  // Blocked rank -> the position in its action list (Schedule::actions[rank]) of the action it
  // waits to run; the list's size when it waits after its last action.
  const std::map<int, std::size_t>& blocked() const { return blocked_; }

 private:
  std::map<int, std::size_t> blocked_;
};

// Runs the lowered programs of all ranks together, with the strictest communication semantics,
// rendezvous: a batch completes only when every operation in it has been matched by the peer's
// operation posted in the batch the peer is waiting in; the k-th send from rank A to rank B
// matches B's k-th receive from A (NCCL ignores tags). A program that completes so also completes
// when sends are buffered. Each operation has exactly one possible partner, so whether the
// programs deadlock, and which messages meet, does not depend on the costs.
//
// Proves, or throws ScheduleError naming what is wrong:
//   - the programs compute exactly the schedule's actions, in its order;
//   - every input is received before the action that needs it, only data already produced is
//     sent, and everything produced is sent;
//   - every matched send and receive carry the same message (a mismatch would silently hand one
//     microbatch's data to another);
//   - no deadlock: on one, the error (a ScheduleDeadlock) names each blocked rank, the step it is
//     blocked at and what it waits for, and prints the schedule grid with the blocked ranks' next
//     actions marked.
// Each action takes its ActionCosts, communication no time. Throws std::invalid_argument for a
// cost that is not positive and finite, or per-stage costs of another count than the virtual stages.
SimulationResult simulate(const Schedule& schedule, const std::vector<RankProgram>& programs,
                          const ActionCosts& costs = {});
// The same for lower(schedule).
SimulationResult simulate(const Schedule& schedule, const ActionCosts& costs = {});

// The dry run as a chart: one line per rank, one column per `slot` time units, each column
// showing the action that runs there ("." where the rank is idle). With unit costs and slot 1,
// the pictures of the pipeline papers:
//   rank 0: 0F0 0F1 .   0B0 ...
std::string format_timeline(const SimulationResult& result, double slot = 1.0);

}  // namespace colo::pipeline
