#pragma once

#include <colo/pipeline/schedule.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace colo::pipeline {

// A schedule that can be asked for by name (hybrid_parallel's pp_style, a planner layout's
// token): its generator and what a caller must know before asking for it.
struct ScheduleEntry {
  // Lower-case letters, digits and '_': "1f1b".
  std::string name;
  // One line for help texts.
  std::string description;
  // Makes the schedule for a shape the registry's shape_problems() accepts.
  std::function<Schedule(const ScheduleShape&)> generate;
  // Rules of this schedule beyond those every schedule has (basic_shape_problems(); chunks above
  // 1 only where supports_chunks), each broken one saying what to change; asked only for shapes
  // that keep those. May be empty.
  std::function<std::vector<std::string>(const ScheduleShape&)> shape_rules;
  // Its B computes the input gradient only and a later W the weight gradient
  // (Schedule::split_backward): what tensor-parallel sequence parallelism and CUDA graphs of the
  // backward cannot follow yet.
  bool splits_backward = false;
  // It runs more than one model chunk (virtual stage) per rank: num_model_chunks > 1.
  bool supports_chunks = false;
};

// Schedules by name, in the order they were added (help texts and the planner list them so).
// torch.distributed.pipelining's get_schedule_class is the model: one table from names to
// schedules, and an unknown name answered with the valid ones.
class ScheduleRegistry {
 public:
  // Throws std::invalid_argument for a malformed or taken name, or an entry without a generator.
  void add(ScheduleEntry entry);

  // The entry named `name` exactly, or nullptr.
  const ScheduleEntry* find(std::string_view name) const;
  // The same, or std::invalid_argument: "unknown pipeline schedule 'zb': use one of gpipe, 1f1b, ...".
  const ScheduleEntry& at(std::string_view name) const;
  const std::vector<ScheduleEntry>& entries() const { return entries_; }
  std::vector<std::string> names() const;

  // Every rule `shape` breaks for the schedule `name` (empty when none), each saying what to
  // change: basic_shape_problems(), chunks above 1 only for a schedule that supports chunks, and
  // when those hold, the entry's own rules. For a caller that reports all of its options' problems at once. Throws
  // as at() for an unknown name.
  std::vector<std::string> shape_problems(std::string_view name, const ScheduleShape& shape) const;
  // The schedule `name` for `shape`. Throws std::invalid_argument listing every problem
  // shape_problems() finds.
  Schedule make(std::string_view name, const ScheduleShape& shape) const;

 private:
  std::vector<ScheduleEntry> entries_;
};

// The one place colo's schedules are registered (gpipe, 1f1b, interleaved, zero_bubble; their
// generators are in schedule_generators.h). A new schedule: write its generator, add it here.
void register_builtin_schedules(ScheduleRegistry& registry);
// A registry holding the built-in schedules, made on first use and never changed.
const ScheduleRegistry& builtin_schedules();

}  // namespace colo::pipeline
