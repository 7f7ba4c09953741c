#include <colo/pipeline/schedule_generators.h>
#include <colo/pipeline/schedule_registry.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <utility>

namespace colo::pipeline {
namespace {

// "a", "a or b", "a, b or c".
std::string one_of(const std::vector<std::string>& names) {
  if (names.size() <= 1) return names.empty() ? "" : names.front();
  return fmt::format("{} or {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

}  // namespace

void ScheduleRegistry::add(ScheduleEntry entry) {
  if (entry.name.empty() || entry.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
    throw std::invalid_argument(fmt::format(
        "ScheduleRegistry::add: '{}' is not a schedule name: use lower-case letters, digits and '_'", entry.name));
  }
  if (find(entry.name)) {
    throw std::invalid_argument(fmt::format("ScheduleRegistry::add: a schedule named '{}' is registered already",
                                            entry.name));
  }
  if (!entry.generate) {
    throw std::invalid_argument(fmt::format("ScheduleRegistry::add: the schedule '{}' has no generator", entry.name));
  }
  entries_.push_back(std::move(entry));
}

const ScheduleEntry* ScheduleRegistry::find(std::string_view name) const {
  for (const auto& entry : entries_) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

const ScheduleEntry& ScheduleRegistry::at(std::string_view name) const {
  if (const auto* entry = find(name)) return *entry;
  throw std::invalid_argument(
      fmt::format("unknown pipeline schedule '{}': use one of {}", name, fmt::join(names(), ", ")));
}

std::vector<std::string> ScheduleRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& entry : entries_) out.push_back(entry.name);
  return out;
}

std::vector<std::string> ScheduleRegistry::shape_problems(std::string_view name, const ScheduleShape& shape) const {
  const ScheduleEntry& entry = at(name);
  auto problems = basic_shape_problems(shape);
  if (!entry.supports_chunks && shape.chunks() > 1) {
    std::vector<std::string> chunked;
    for (const auto& other : entries_) {
      if (other.supports_chunks) chunked.push_back(other.name);
    }
    problems.push_back(fmt::format("chunks={} needs the {} schedule ({} runs one model chunk per rank): set chunks=1{}",
                                   shape.chunks(), one_of(chunked), entry.name,
                                   chunked.empty() ? "" : " or use " + one_of(chunked)));
  }
  if (entry.shape_rules && problems.empty()) {
    for (auto& problem : entry.shape_rules(shape)) problems.push_back(std::move(problem));
  }
  return problems;
}

Schedule ScheduleRegistry::make(std::string_view name, const ScheduleShape& shape) const {
  const auto problems = shape_problems(name, shape);
  if (!problems.empty()) {
    throw std::invalid_argument(
        fmt::format("cannot make a {} pipeline schedule for {}:{}", name, describe(shape), list_problems(problems)));
  }
  const ScheduleEntry& entry = at(name);
  Schedule schedule = entry.generate(shape);
  if (schedule.split_backward != entry.splits_backward) {
    throw std::logic_error(fmt::format("the {} schedule's generator {} the backward, but its entry says it {}", name,
                                       schedule.split_backward ? "splits" : "does not split",
                                       entry.splits_backward ? "does" : "does not"));
  }
  return schedule;
}

void register_builtin_schedules(ScheduleRegistry& registry) {
  ScheduleEntry gpipe;
  gpipe.name = "gpipe";
  gpipe.description = "every forward, then every backward: each rank holds all microbatches' activations";
  gpipe.generate = gpipe_schedule;
  registry.add(std::move(gpipe));

  ScheduleEntry one_f_one_b;
  one_f_one_b.name = "1f1b";
  one_f_one_b.description = "a warm-up of forwards, then one forward and one backward: rank r holds pp - r microbatches";
  one_f_one_b.generate = one_f_one_b_schedule;
  registry.add(std::move(one_f_one_b));

  ScheduleEntry interleaved;
  interleaved.name = "interleaved";
  interleaved.description =
      "1F1B over num_model_chunks chunks per rank: the bubble divided by the chunks, for as many times the messages";
  interleaved.generate = interleaved_schedule;
  interleaved.shape_rules = interleaved_shape_problems;
  interleaved.supports_chunks = true;
  registry.add(std::move(interleaved));

  ScheduleEntry zero_bubble;
  zero_bubble.name = "zero_bubble";
  zero_bubble.description =
      "ZB-H1: 1F1B with the weight gradients (W) split from the backward and deferred into the bubble";
  zero_bubble.generate = zero_bubble_h1_schedule;
  zero_bubble.splits_backward = true;
  registry.add(std::move(zero_bubble));
}

const ScheduleRegistry& builtin_schedules() {
  static const ScheduleRegistry registry = [] {
    ScheduleRegistry r;
    register_builtin_schedules(r);
    return r;
  }();
  return registry;
}

}  // namespace colo::pipeline
