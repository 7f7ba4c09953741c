#include <colo/pipeline/schedule.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>

namespace colo::pipeline {
namespace {

// Where one (stage, microbatch, kind) was found: rank and position in its action list.
struct Seen {
  int count = 0;
  int rank = -1;
  std::size_t index = 0;
};

}  // namespace

std::string describe(const ScheduleShape& shape) {
  return fmt::format("pp={}, microbatches={}, chunks={}", shape.pp(), shape.microbatches(), shape.chunks());
}

std::string list_problems(const std::vector<std::string>& problems) {
  constexpr std::size_t kMaxListed = 20;
  std::string out;
  for (std::size_t i = 0; i < problems.size() && i < kMaxListed; ++i) out += "\n  - " + problems[i];
  if (problems.size() > kMaxListed) out += fmt::format("\n  ... and {} more", problems.size() - kMaxListed);
  return out;
}

std::vector<std::string> basic_shape_problems(const ScheduleShape& shape) {
  std::vector<std::string> problems;
  if (shape.pp() < 1) problems.push_back(fmt::format("pp must be at least 1, got {}", shape.pp()));
  if (shape.microbatches() < 1) {
    problems.push_back(fmt::format("microbatches must be at least 1, got {}", shape.microbatches()));
  }
  if (shape.chunks() < 1) problems.push_back(fmt::format("chunks must be at least 1, got {}", shape.chunks()));
  return problems;
}

int peak_in_flight(const Schedule& schedule, int stage) {
  if (schedule.forward_only || stage < 0 || stage >= schedule.num_stages()) return 0;
  int held = 0;
  int peak = 0;
  for (const auto& action : schedule.actions.at(static_cast<std::size_t>(schedule.rank_of(stage)))) {
    if (action.stage != stage) continue;
    if (action.kind == ActionKind::kForward) peak = std::max(peak, ++held);
    if (action.kind == ActionKind::kBackward) --held;
  }
  return peak;
}

void validate(const Schedule& schedule) {
  const auto problems = schedule_problems(schedule);
  if (problems.empty()) return;
  std::vector<std::string> messages;
  for (const auto& problem : problems) messages.push_back(problem.message);
  throw ScheduleError(fmt::format("invalid pipeline schedule ({}):{}", describe(schedule.shape), list_problems(messages)));
}

std::vector<ScheduleProblem> schedule_problems(const Schedule& schedule) {
  const ScheduleShape& shape = schedule.shape;
  std::vector<ScheduleProblem> problems;
  const auto add = [&problems](int rank, std::string message) { problems.push_back({std::move(message), rank}); };

  // The shape first: nothing below means anything without it.
  for (auto& message : basic_shape_problems(shape)) add(-1, std::move(message));
  if (shape.chunks() > 1 && shape.pp() == 1) {
    add(-1, "chunks > 1 needs pp >= 2: with one rank, consecutive stages would share it");
  }
  if (problems.empty() && schedule.actions.size() != static_cast<std::size_t>(shape.pp())) {
    add(-1, fmt::format("there are action lists for {} ranks, not pp={}", schedule.actions.size(), shape.pp()));
  }
  if (!problems.empty()) return problems;

  const int stages = shape.num_stages();
  const int microbatches = shape.microbatches();
  // seen[(stage * microbatches + microbatch) * 3 + kind]
  std::vector<Seen> seen(static_cast<std::size_t>(stages) * microbatches * 3);
  const auto slot = [&](const Action& a) -> Seen& {
    return seen[(static_cast<std::size_t>(a.stage) * microbatches + a.microbatch) * 3 + static_cast<int>(a.kind)];
  };

  for (int rank = 0; rank < shape.pp(); ++rank) {
    const auto& actions = schedule.actions[rank];
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const auto where = fmt::format("rank {} action {} ({})", rank, i, a.str());
      if (a.stage < 0 || a.stage >= stages) {
        add(rank, fmt::format("{}: stage {} is out of range [0, {})", where, a.stage, stages));
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= microbatches) {
        add(rank, fmt::format("{}: microbatch {} is out of range [0, {})", where, a.microbatch, microbatches));
        continue;
      }
      if (a.kind != ActionKind::kForward && schedule.forward_only) {
        add(rank, fmt::format("{}: a {} action in a forward-only schedule", where, to_char(a.kind)));
        continue;
      }
      if (a.kind == ActionKind::kWeight && !schedule.split_backward) {
        add(rank, fmt::format(
            "{}: a W action in a schedule that does not split the backward (its B computes the weight gradient)",
            where));
        continue;
      }
      if (schedule.rank_of(a.stage) != rank) {
        add(rank, fmt::format("{}: stage {} runs on rank {} (stage % pp), not rank {}", where, a.stage,
                                       schedule.rank_of(a.stage), rank));
      }
      Seen& s = slot(a);
      if (++s.count == 1) {
        s.rank = rank;
        s.index = i;
      } else {
        add(rank, fmt::format("{}: a duplicate of rank {} action {}", where, s.rank, s.index));
      }
    }
  }

  const char* kinds_needed = schedule.forward_only ? "F" : schedule.split_backward ? "F, B and W" : "F and B";
  for (int stage = 0; stage < stages; ++stage) {
    for (int mb = 0; mb < microbatches; ++mb) {
      const Seen& f = slot({stage, ActionKind::kForward, mb});
      const Seen& b = slot({stage, ActionKind::kBackward, mb});
      const Seen& w = slot({stage, ActionKind::kWeight, mb});
      for (const auto& [seen_kind, kind] : {std::pair{&f, ActionKind::kForward}, std::pair{&b, ActionKind::kBackward},
                                            std::pair{&w, ActionKind::kWeight}}) {
        const bool needed = kind == ActionKind::kForward ||
                            (!schedule.forward_only && (kind == ActionKind::kBackward || schedule.split_backward));
        if (seen_kind->count == 0 && needed) {
          add(schedule.rank_of(stage), fmt::format("{} is missing (every stage and microbatch needs {})",
                                                   Action{stage, kind, mb}.str(), kinds_needed));
        }
      }
      const auto check_order = [&](const Seen& before, const Seen& after, ActionKind before_kind,
                                   ActionKind after_kind) {
        if (before.count > 0 && after.count > 0 && before.rank == after.rank && after.index < before.index) {
          add(after.rank, fmt::format("rank {}: {} (action {}) runs before {} (action {})", after.rank,
                                      Action{stage, after_kind, mb}.str(), after.index,
                                      Action{stage, before_kind, mb}.str(), before.index));
        }
      };
      check_order(f, b, ActionKind::kForward, ActionKind::kBackward);
      check_order(b, w, ActionKind::kBackward, ActionKind::kWeight);
    }
  }
  return problems;
}

}  // namespace colo::pipeline
