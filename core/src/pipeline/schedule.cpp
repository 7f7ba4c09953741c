#include <colo/pipeline/schedule.h>
#include <colo/pipeline/schedule_generators.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>

namespace colo::pipeline {
namespace {

constexpr std::array<ScheduleStyle, 4> kStyles = {ScheduleStyle::kGPipe, ScheduleStyle::kOneFOneB,
                                                  ScheduleStyle::kInterleaved, ScheduleStyle::kZeroBubble};
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

std::string to_string(ScheduleStyle style) {
  switch (style) {
    case ScheduleStyle::kGPipe:
      return "gpipe";
    case ScheduleStyle::kOneFOneB:
      return "1f1b";
    case ScheduleStyle::kInterleaved:
      return "interleaved";
    case ScheduleStyle::kZeroBubble:
      return "zero_bubble";
  }
  throw std::logic_error("to_string: unknown ScheduleStyle");
}

ScheduleStyle parse_schedule_style(std::string_view name) {
  std::string valid;
  for (auto style : kStyles) {
    if (name == to_string(style)) return style;
    valid += (valid.empty() ? "" : ", ") + to_string(style);
  }
  throw std::invalid_argument(fmt::format("unknown pipeline schedule '{}': use one of {}", name, valid));
}

std::vector<std::string> shape_problems(ScheduleStyle style, const ScheduleShape& shape) {
  std::vector<std::string> problems;
  if (shape.pp() < 1) problems.push_back(fmt::format("pp must be at least 1, got {}", shape.pp()));
  if (shape.microbatches() < 1) {
    problems.push_back(fmt::format("microbatches must be at least 1, got {}", shape.microbatches()));
  }
  if (shape.chunks() < 1) problems.push_back(fmt::format("chunks must be at least 1, got {}", shape.chunks()));
  if (style != ScheduleStyle::kInterleaved) {
    if (shape.chunks() > 1) {
      problems.push_back(fmt::format(
          "chunks={} needs the interleaved schedule ({} runs one model chunk per rank): set chunks=1 or use "
          "interleaved",
          shape.chunks(), to_string(style)));
    }
    return problems;
  }
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

Schedule make_schedule(ScheduleStyle style, const ScheduleShape& shape) {
  switch (style) {
    case ScheduleStyle::kGPipe:
      return gpipe_schedule(shape);
    case ScheduleStyle::kOneFOneB:
      return one_f_one_b_schedule(shape);
    case ScheduleStyle::kInterleaved:
      return interleaved_schedule(shape);
    case ScheduleStyle::kZeroBubble:
      return zero_bubble_h1_schedule(shape);
  }
  throw std::logic_error("make_schedule: unknown ScheduleStyle");
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
  const ScheduleShape& shape = schedule.shape;
  const auto fail = [&](const std::vector<std::string>& problems) {
    throw ScheduleError(fmt::format("invalid pipeline schedule ({}):{}", describe(shape), list_problems(problems)));
  };

  // The shape first: nothing below means anything without it.
  std::vector<std::string> problems;
  if (shape.pp() < 1) problems.push_back(fmt::format("pp must be at least 1, got {}", shape.pp()));
  if (shape.microbatches() < 1) {
    problems.push_back(fmt::format("microbatches must be at least 1, got {}", shape.microbatches()));
  }
  if (shape.chunks() < 1) problems.push_back(fmt::format("chunks must be at least 1, got {}", shape.chunks()));
  if (shape.chunks() > 1 && shape.pp() == 1) {
    problems.push_back("chunks > 1 needs pp >= 2: with one rank, consecutive stages would share it");
  }
  if (problems.empty() && schedule.actions.size() != static_cast<std::size_t>(shape.pp())) {
    problems.push_back(
        fmt::format("there are action lists for {} ranks, not pp={}", schedule.actions.size(), shape.pp()));
  }
  if (!problems.empty()) fail(problems);

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
        problems.push_back(fmt::format("{}: stage {} is out of range [0, {})", where, a.stage, stages));
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= microbatches) {
        problems.push_back(fmt::format("{}: microbatch {} is out of range [0, {})", where, a.microbatch, microbatches));
        continue;
      }
      if (a.kind != ActionKind::kForward && schedule.forward_only) {
        problems.push_back(fmt::format("{}: a {} action in a forward-only schedule", where, to_char(a.kind)));
        continue;
      }
      if (a.kind == ActionKind::kWeight && !schedule.split_backward) {
        problems.push_back(fmt::format(
            "{}: a W action in a schedule that does not split the backward (its B computes the weight gradient)",
            where));
        continue;
      }
      if (schedule.rank_of(a.stage) != rank) {
        problems.push_back(fmt::format("{}: stage {} runs on rank {} (stage % pp), not rank {}", where, a.stage,
                                       schedule.rank_of(a.stage), rank));
      }
      Seen& s = slot(a);
      if (++s.count == 1) {
        s.rank = rank;
        s.index = i;
      } else {
        problems.push_back(fmt::format("{}: a duplicate of rank {} action {}", where, s.rank, s.index));
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
          problems.push_back(fmt::format("{} is missing (every stage and microbatch needs {})",
                                         Action{stage, kind, mb}.str(), kinds_needed));
        }
      }
      const auto check_order = [&](const Seen& before, const Seen& after, ActionKind before_kind,
                                   ActionKind after_kind) {
        if (before.count > 0 && after.count > 0 && before.rank == after.rank && after.index < before.index) {
          problems.push_back(fmt::format("rank {}: {} (action {}) runs before {} (action {})", after.rank,
                                         Action{stage, after_kind, mb}.str(), after.index,
                                         Action{stage, before_kind, mb}.str(), before.index));
        }
      };
      check_order(f, b, ActionKind::kForward, ActionKind::kBackward);
      check_order(b, w, ActionKind::kBackward, ActionKind::kWeight);
    }
  }
  if (!problems.empty()) fail(problems);
}

}  // namespace colo::pipeline
