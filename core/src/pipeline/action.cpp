#include <colo/pipeline/action.h>
#include <fmt/format.h>

#include <cctype>
#include <limits>
#include <stdexcept>

namespace colo::pipeline {
namespace {

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::invalid_argument bad_action(std::string_view text, std::string_view why) {
  return std::invalid_argument(fmt::format(
      "'{}' is not a pipeline action ({}): write <stage><F|B|W><microbatch>, e.g. '1F3' for stage 1's forward "
      "of microbatch 3",
      text, why));
}

// Reads the decimal number at text[pos...], advancing pos past it.
int read_number(std::string_view whole, std::string_view text, std::size_t& pos, const char* what) {
  const std::size_t begin = pos;
  long long value = 0;
  while (pos < text.size() && is_digit(text[pos])) {
    value = value * 10 + (text[pos] - '0');
    if (value > std::numeric_limits<int>::max()) {
      throw bad_action(whole, fmt::format("the {} is too large", what));
    }
    ++pos;
  }
  if (pos == begin) {
    throw bad_action(whole, fmt::format("the {} is missing", what));
  }
  return static_cast<int>(value);
}

}  // namespace

char to_char(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return 'F';
    case ActionKind::kBackward:
      return 'B';
    case ActionKind::kWeight:
      return 'W';
  }
  throw std::logic_error("to_char: unknown ActionKind");
}

std::string Action::str() const { return fmt::format("{}{}{}", stage, to_char(kind), microbatch); }

Action Action::parse(std::string_view text) {
  std::size_t first = 0;
  std::size_t last = text.size();
  while (first < last && is_space(text[first])) ++first;
  while (last > first && is_space(text[last - 1])) --last;
  const std::string_view core = text.substr(first, last - first);

  std::size_t pos = 0;
  Action action;
  action.stage = read_number(text, core, pos, "stage");
  if (pos == core.size()) {
    throw bad_action(text, "the kind is missing");
  }
  switch (core[pos]) {
    case 'F':
      action.kind = ActionKind::kForward;
      break;
    case 'B':
      action.kind = ActionKind::kBackward;
      break;
    case 'W':
      action.kind = ActionKind::kWeight;
      break;
    default:
      throw bad_action(text, fmt::format("'{}' is not a kind", core[pos]));
  }
  ++pos;
  action.microbatch = read_number(text, core, pos, "microbatch");
  if (pos != core.size()) {
    throw bad_action(text, fmt::format("unexpected '{}' after the microbatch", core.substr(pos)));
  }
  return action;
}

std::ostream& operator<<(std::ostream& os, const Action& action) { return os << action.str(); }

std::string format_actions(const std::vector<Action>& actions) {
  std::string out;
  for (const auto& action : actions) {
    if (!out.empty()) out += ' ';
    out += action.str();
  }
  return out;
}

std::vector<Action> parse_actions(std::string_view text) {
  std::vector<Action> actions;
  std::size_t pos = 0;
  while (true) {
    while (pos < text.size() && (is_space(text[pos]) || text[pos] == ',')) ++pos;
    if (pos == text.size()) break;
    std::size_t end = pos;
    while (end < text.size() && !is_space(text[end]) && text[end] != ',') ++end;
    try {
      actions.push_back(Action::parse(text.substr(pos, end - pos)));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("action {} of the list: {}", actions.size(), e.what()));
    }
    pos = end;
  }
  return actions;
}

}  // namespace colo::pipeline
