#include <colo/pipeline/schedule_format.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace colo::pipeline {
namespace {

std::string marked(const std::string& text) { return ">>" + text + "<<"; }

}  // namespace

std::string format_schedule_grid(const Schedule& schedule, const std::map<int, std::size_t>& marked_cells) {
  const auto& ranks = schedule.actions;
  std::size_t rows = 0;
  for (const auto& actions : ranks) rows = std::max(rows, actions.size());
  // A mark past a rank's last action points at its end.
  std::map<int, std::size_t> marks;
  for (const auto& [rank, index] : marked_cells) {
    if (rank < 0 || static_cast<std::size_t>(rank) >= ranks.size()) continue;
    marks[rank] = std::min(index, ranks[rank].size());
    rows = std::max(rows, marks[rank] + 1);
  }

  // cells[rank][row]
  std::vector<std::vector<std::string>> cells(ranks.size(), std::vector<std::string>(rows));
  std::vector<std::size_t> widths(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (std::size_t i = 0; i < ranks[r].size(); ++i) cells[r][i] = ranks[r][i].str();
    const auto mark = marks.find(static_cast<int>(r));
    if (mark != marks.end()) {
      auto& cell = cells[r][mark->second];
      cell = marked(cell.empty() ? "end" : cell);
    }
    widths[r] = fmt::format("rank {}", r).size();
    for (const auto& cell : cells[r]) widths[r] = std::max(widths[r], cell.size());
  }

  const std::size_t label_width = fmt::format("step {}:", rows == 0 ? 0 : rows - 1).size();
  std::string out(label_width, ' ');
  for (std::size_t r = 0; r < ranks.size(); ++r) out += fmt::format("  {:<{}}", fmt::format("rank {}", r), widths[r]);
  out.erase(out.find_last_not_of(' ') + 1);
  out += '\n';
  for (std::size_t i = 0; i < rows; ++i) {
    std::string line = fmt::format("{:<{}}", fmt::format("step {}:", i), label_width);
    for (std::size_t r = 0; r < ranks.size(); ++r) line += fmt::format("  {:<{}}", cells[r][i], widths[r]);
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + '\n';
  }
  return out;
}

std::string format_rank_schedule(const Schedule& schedule, int rank, std::optional<std::size_t> marked_index) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= schedule.actions.size()) {
    throw std::invalid_argument(
        fmt::format("format_rank_schedule: rank {} is out of range [0, {})", rank, schedule.actions.size()));
  }
  constexpr std::size_t kPerLine = 12;
  const auto& actions = schedule.actions[rank];
  if (marked_index) marked_index = std::min(*marked_index, actions.size());  // past the end: the end
  std::string stages;
  for (int stage = rank; stage < schedule.num_stages(); stage += std::max(schedule.pp(), 1)) {
    stages += (stages.empty() ? "" : ", ") + std::to_string(stage);
  }
  std::string out =
      fmt::format("rank {} of {} (stages {}), {} actions:", rank, schedule.actions.size(), stages, actions.size());
  const std::size_t count = std::max(actions.size(), marked_index ? *marked_index + 1 : 0);
  const std::size_t index_width = std::to_string(count == 0 ? 0 : count - 1).size();
  for (std::size_t i = 0; i < count; ++i) {
    if (i % kPerLine == 0) out += fmt::format("\n  [{:>{}}]", i, index_width);
    const std::string text = i < actions.size() ? actions[i].str() : "end";
    out += ' ' + (marked_index == i ? marked(text) : text);
  }
  return out + '\n';
}

}  // namespace colo::pipeline
