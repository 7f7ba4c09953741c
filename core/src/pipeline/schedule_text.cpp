#include <colo/files/files.h>
#include <colo/pipeline/schedule_text.h>
#include <colo/pipeline/simulator.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace colo::pipeline {
namespace {

// One rank's line: where it is in the text and its actions.
struct RankLine {
  int line = 0;
  std::vector<Action> actions;
};

bool is_blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
}

[[noreturn]] void refuse(const std::string& source, const std::vector<std::string>& problems) {
  throw std::invalid_argument(
      fmt::format("the pipeline schedule in {} cannot run:{}", source, list_problems(problems)));
}

// The rank lines of `text`; a line that does not parse is recorded in `problems` (its rank kept,
// without actions, so that later lines keep their ranks).
std::vector<RankLine> read_rank_lines(std::string_view text, const std::string& source,
                                      std::vector<std::string>& problems) {
  std::vector<RankLine> ranks;
  int number = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    line = line.substr(0, line.find('#'));
    if (is_blank(line)) continue;
    ranks.push_back({number, {}});
    try {
      ranks.back().actions = parse_actions(line);
    } catch (const std::invalid_argument& e) {
      problems.push_back(fmt::format("{}:{}: rank {}'s line: {}", source, number, ranks.size() - 1, e.what()));
    }
  }
  return ranks;
}

// The rank lines against the pp size the text must fit.
void check_rank_count(const std::vector<RankLine>& ranks, int pp, const std::string& source,
                      std::vector<std::string>& problems) {
  const int lines = static_cast<int>(ranks.size());
  if (lines == 0) {
    problems.push_back(fmt::format("{}: no rank lines: write one line of actions per pipeline rank, rank 0 first",
                                   source));
  } else if (lines < pp) {
    problems.push_back(fmt::format(
        "{}:{}: the text ends after {} rank line{} (this is rank {}'s), but pp={} needs one line per pipeline rank, "
        "rank 0 first: ranks {} to {} have none",
        source, ranks.back().line, lines, lines == 1 ? "" : "s", lines - 1, pp, lines, pp - 1));
  } else if (lines > pp) {
    problems.push_back(fmt::format(
        "{}:{}: a line for rank {}, but pp={} has ranks 0 to {}: the text has {} rank lines, write one per pipeline "
        "rank",
        source, ranks[static_cast<std::size_t>(pp)].line, pp, pp, pp - 1, lines));
  }
}

// simulate()'s verdict on a valid schedule, its deadlock pointed at the lines.
void check_runs(const Schedule& schedule, const std::vector<RankLine>& ranks, const std::string& source,
                std::vector<std::string>& problems) {
  try {
    simulate(schedule);
  } catch (const ScheduleDeadlock& e) {
    for (const auto& [rank, index] : e.blocked()) {
      const auto& actions = schedule.actions[static_cast<std::size_t>(rank)];
      problems.push_back(fmt::format(
          "{}:{}: rank {} never runs its action {} ({}): it waits for a message that its peer sends only after "
          "waiting for this rank (a deadlock)",
          source, ranks[static_cast<std::size_t>(rank)].line, rank, index,
          index < actions.size() ? actions[index].str() : "its end"));
    }
    problems.push_back(fmt::format("{}: {}", source, e.what()));
  } catch (const ScheduleError& e) {
    problems.push_back(fmt::format("{}: {}", source, e.what()));
  }
}

}  // namespace

Schedule schedule_from_text(std::string_view text, const std::string& source, int pp, int microbatches) {
  if (pp < 0 || microbatches < 0) {
    throw std::invalid_argument(fmt::format(
        "schedule_from_text: pp and microbatches must be 0 (from the text) or positive, got {} and {}", pp,
        microbatches));
  }
  std::vector<std::string> problems;
  const auto ranks = read_rank_lines(text, source, problems);
  if (pp == 0) pp = static_cast<int>(ranks.size());
  check_rank_count(ranks, pp, source, problems);
  if (!problems.empty()) refuse(source, problems);

  // The largest stage and microbatch, and where they are.
  Action last_stage{0, ActionKind::kForward, 0}, last_microbatch{0, ActionKind::kForward, -1};
  int last_stage_line = 0, last_microbatch_line = 0;
  std::size_t count = 0;
  bool weights = false;
  for (const auto& rank : ranks) {
    for (const auto& action : rank.actions) {
      if (action.stage > last_stage.stage) std::tie(last_stage, last_stage_line) = std::pair{action, rank.line};
      if (action.microbatch > last_microbatch.microbatch) {
        std::tie(last_microbatch, last_microbatch_line) = std::pair{action, rank.line};
      }
      weights = weights || action.kind == ActionKind::kWeight;
      ++count;
    }
  }
  if (microbatches == 0) {
    microbatches = last_microbatch.microbatch + 1;
  } else if (last_microbatch.microbatch + 1 < microbatches) {
    problems.push_back(fmt::format(
        "{}: the actions run microbatches 0 to {} ({}), but each step runs {}: give every microbatch its F and B "
        "on every stage, or run {} microbatches",
        source, last_microbatch.microbatch, last_microbatch.microbatch + 1, microbatches,
        last_microbatch.microbatch + 1));
  }
  const int chunks = last_stage.stage / pp + 1;
  // Every stage runs an F of every microbatch: fewer actions than that is a typo'd number (which
  // would also make validate() count over a grid of that size).
  if (static_cast<double>(chunks) * pp * std::max(microbatches, 1) > static_cast<double>(count)) {
    const bool stage_too_big = static_cast<double>(chunks) * pp > static_cast<double>(count);
    problems.push_back(fmt::format(
        "{}:{}: {} makes this a schedule of {} stages and {} microbatches, but its {} actions cannot hold the F "
        "of every stage and microbatch: is the {} a typo?",
        source, stage_too_big ? last_stage_line : last_microbatch_line,
        (stage_too_big ? last_stage : last_microbatch).str(), static_cast<int64_t>(chunks) * pp, microbatches, count,
        stage_too_big ? "stage" : "microbatch"));
    refuse(source, problems);
  }
  Schedule schedule(ScheduleShape(pp, microbatches).chunks(chunks));
  schedule.split_backward = weights;
  for (std::size_t r = 0; r < ranks.size(); ++r) schedule.actions[r] = ranks[r].actions;

  for (const auto& problem : schedule_problems(schedule)) {
    problems.push_back(problem.rank < 0 ? fmt::format("{}: {}", source, problem.message)
                                        : fmt::format("{}:{}: {}", source,
                                                      ranks[static_cast<std::size_t>(problem.rank)].line,
                                                      problem.message));
  }
  if (problems.empty()) check_runs(schedule, ranks, source, problems);
  if (!problems.empty()) refuse(source, problems);
  return schedule;
}

Schedule load_schedule_file(const std::string& path, int pp, int microbatches) {
  if (!files::exists(path)) {
    throw std::invalid_argument(fmt::format("the pipeline schedule file '{}' does not exist (looked for {})", path,
                                            files::absolute(path)));
  }
  if (!files::is_regular_file(path)) {
    throw std::invalid_argument(fmt::format("the pipeline schedule file '{}' is not a regular file", path));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    throw std::invalid_argument(fmt::format("the pipeline schedule file '{}' cannot be read", path));
  }
  return schedule_from_text(text.str(), path, pp, microbatches);
}

std::string schedule_to_text(const Schedule& schedule) {
  std::string out = fmt::format("# pipeline schedule: {}{}\n", describe(schedule.shape),
                                schedule.split_backward ? ", backward split into B and W" : "");
  for (const auto& actions : schedule.actions) {
    std::string line;
    for (const auto& action : actions) {
      if (!line.empty()) line += ',';
      line += action.str();
    }
    out += line + '\n';
  }
  return out;
}

}  // namespace colo::pipeline
