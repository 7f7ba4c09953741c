#include <colo/pipeline/action_costs.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <utility>

namespace colo::pipeline {

double cost_of(const Action& action, const ActionCosts& costs, bool split_backward, int chunks) {
  double cost = 0;
  switch (action.kind) {
    case ActionKind::kForward:
      cost = costs.forward();
      break;
    case ActionKind::kBackward:
      cost = split_backward ? costs.input_grad() : costs.backward();
      break;
    case ActionKind::kWeight:
      cost = costs.weight_grad();
      break;
  }
  return cost / chunks;
}

void check_costs(const ActionCosts& costs) {
  const std::pair<const char*, double> named[] = {{"forward", costs.forward()},
                                                  {"backward", costs.backward()},
                                                  {"input_grad", costs.input_grad()},
                                                  {"weight_grad", costs.weight_grad()}};
  for (const auto& [name, cost] : named) {
    if (!std::isfinite(cost) || cost <= 0) {
      throw std::invalid_argument(fmt::format("ActionCosts: {} must be finite and > 0, got {}", name, cost));
    }
  }
}

}  // namespace colo::pipeline
