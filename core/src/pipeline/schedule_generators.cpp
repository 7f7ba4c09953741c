#include <colo/pipeline/schedule_generators.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace colo::pipeline {
namespace {

// A generator's own check (the registry checks the same rules, with hints naming other schedules).
void check_shape(const char* schedule, const ScheduleShape& shape, const std::vector<std::string>& own_rules) {
  auto problems = basic_shape_problems(shape);
  problems.insert(problems.end(), own_rules.begin(), own_rules.end());
  if (problems.empty()) return;
  throw std::invalid_argument(
      fmt::format("cannot make a {} pipeline schedule for {}:{}", schedule, describe(shape), list_problems(problems)));
}

// The rule of the schedules that run one model chunk per rank.
std::vector<std::string> one_chunk(const ScheduleShape& shape) {
  if (shape.chunks() <= 1) return {};
  return {fmt::format("chunks={}: this schedule runs one model chunk per rank", shape.chunks())};
}

Action forward(int stage, int mb) { return {stage, ActionKind::kForward, mb}; }
Action backward(int stage, int mb) { return {stage, ActionKind::kBackward, mb}; }
Action weight(int stage, int mb) { return {stage, ActionKind::kWeight, mb}; }

// 1F1B's order of F and B on one stage: `warmup` forwards, then forward / backward pairs, then
// the backwards left. GPipe is the case warmup = m.
std::vector<Action> one_f_one_b_order(int stage, int microbatches, int warmup) {
  std::vector<Action> actions;
  for (int mb = 0; mb < warmup; ++mb) actions.push_back(forward(stage, mb));
  for (int mb = warmup; mb < microbatches; ++mb) {
    actions.push_back(forward(stage, mb));
    actions.push_back(backward(stage, mb - warmup));
  }
  for (int mb = microbatches - warmup; mb < microbatches; ++mb) actions.push_back(backward(stage, mb));
  return actions;
}

}  // namespace

std::vector<std::string> interleaved_shape_problems(const ScheduleShape& shape) {
  std::vector<std::string> problems;
  if (shape.pp() == 1) {
    problems.push_back("the interleaved schedule needs pp >= 2 (one rank has nothing to interleave): use 1f1b");
  }
  if (shape.chunks() == 1) {
    problems.push_back(
        "the interleaved schedule needs chunks >= 2 model chunks per rank, got 1: raise chunks, "
        "or use 1f1b for one chunk per rank");
  }
  if (shape.pp() >= 1 && shape.microbatches() >= 1 && shape.microbatches() % shape.pp() != 0) {
    const int below = shape.microbatches() / shape.pp() * shape.pp();
    const int above = below + shape.pp();
    problems.push_back(fmt::format(
        "the interleaved schedule runs microbatches in groups of pp, so microbatches must be a multiple of pp={}, "
        "got {}: use {}",
        shape.pp(), shape.microbatches(), below > 0 ? fmt::format("{} or {}", below, above) : std::to_string(above)));
  }
  return problems;
}

Schedule gpipe_schedule(const ScheduleShape& shape) {
  check_shape("gpipe", shape, one_chunk(shape));
  Schedule schedule(shape);
  const int warmup = shape.pp() == 1 ? 0 : shape.microbatches();
  for (int rank = 0; rank < shape.pp(); ++rank) {
    schedule.actions[rank] = one_f_one_b_order(rank, shape.microbatches(), warmup);
  }
  return schedule;
}

Schedule one_f_one_b_schedule(const ScheduleShape& shape) {
  check_shape("1f1b", shape, one_chunk(shape));
  Schedule schedule(shape);
  for (int rank = 0; rank < shape.pp(); ++rank) {
    const int warmup = std::min(shape.pp() - rank - 1, shape.microbatches());
    schedule.actions[rank] = one_f_one_b_order(rank, shape.microbatches(), warmup);
  }
  return schedule;
}

Schedule interleaved_schedule(const ScheduleShape& shape) {
  check_shape("interleaved", shape, interleaved_shape_problems(shape));
  Schedule schedule(shape);
  const int pp = shape.pp();
  const int chunks = shape.chunks();
  const int total = chunks * shape.microbatches();  // virtual microbatches per rank
  const int group = pp * chunks;                    // virtual microbatches per group of pp microbatches
  for (int rank = 0; rank < pp; ++rank) {
    // Virtual microbatch k's stage and microbatch, forward and backward.
    const auto forward_of = [&](int k) {
      const int chunk = (k % group) / pp;
      return forward(chunk * pp + rank, k / group * pp + k % pp);
    };
    const auto backward_of = [&](int k) {
      const int chunk = chunks - 1 - (k % group) / pp;
      return backward(chunk * pp + rank, k / group * pp + k % pp);
    };
    const int warmup = std::min(pp - rank - 1 + (chunks - 1) * pp, total);
    auto& actions = schedule.actions[rank];
    for (int k = 0; k < warmup; ++k) actions.push_back(forward_of(k));
    for (int k = 0; k + warmup < total; ++k) {
      actions.push_back(forward_of(k + warmup));
      actions.push_back(backward_of(k));
    }
    for (int k = total - warmup; k < total; ++k) actions.push_back(backward_of(k));
  }
  return schedule;
}

Schedule zero_bubble_h1_schedule(const ScheduleShape& shape) {
  check_shape("zero_bubble", shape, one_chunk(shape));
  Schedule schedule(shape);
  schedule.split_backward = true;
  const int m = shape.microbatches();
  for (int rank = 0; rank < shape.pp(); ++rank) {
    const int warmup = std::min(shape.pp() - rank - 1, m);
    const int deferred = std::min(rank, m - warmup);  // F B pairs whose W waits for the end
    auto& actions = schedule.actions[rank];
    int next_f = 0;
    int next_b = 0;
    int next_w = 0;
    for (; next_f < warmup; ++next_f) actions.push_back(forward(rank, next_f));
    for (int i = 0; i < deferred; ++i) {
      actions.push_back(forward(rank, next_f++));
      actions.push_back(backward(rank, next_b++));
    }
    while (next_f < m) {
      actions.push_back(forward(rank, next_f++));
      actions.push_back(backward(rank, next_b++));
      actions.push_back(weight(rank, next_w++));
    }
    while (next_b < m) {
      actions.push_back(backward(rank, next_b++));
      actions.push_back(weight(rank, next_w++));
    }
    while (next_w < m) actions.push_back(weight(rank, next_w++));
  }
  return schedule;
}

}  // namespace colo::pipeline

namespace colo::pipeline {

Schedule forward_only_schedule(const ScheduleShape& shape) {
  std::vector<std::string> problems;
  if (shape.pp() < 1) problems.push_back(fmt::format("pp must be at least 1, got {}", shape.pp()));
  if (shape.microbatches() < 1) problems.push_back(fmt::format("microbatches must be at least 1, got {}", shape.microbatches()));
  if (shape.chunks() < 1 || (shape.chunks() > 1 && shape.pp() < 2)) {
    problems.push_back(fmt::format("chunks must be 1, or above 1 with pp >= 2; got chunks {} with pp {}", shape.chunks(),
                                   shape.pp()));
  }
  if (!problems.empty()) {
    throw std::invalid_argument(fmt::format("forward_only_schedule: {}", fmt::join(problems, "; ")));
  }
  Schedule schedule(shape);
  schedule.forward_only = true;
  for (int rank = 0; rank < shape.pp(); ++rank) {
    for (int chunk = 0; chunk < shape.chunks(); ++chunk) {
      for (int mb = 0; mb < shape.microbatches(); ++mb) {
        schedule.actions[rank].push_back({chunk * shape.pp() + rank, ActionKind::kForward, mb});
      }
    }
  }
  return schedule;
}

}  // namespace colo::pipeline
