#include <colo/pipeline/action_costs.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace colo::pipeline {
namespace {

template <typename Costs>
double cost_by_kind(const Action& action, const Costs& costs, bool split_backward) {
  switch (action.kind) {
    case ActionKind::kForward:
      return costs.forward;
    case ActionKind::kBackward:
      return split_backward ? costs.input_grad : costs.backward;
    case ActionKind::kWeight:
      return costs.weight_grad;
  }
  return 0.0;
}

void check_named(const StageCosts& costs, const std::string& where) {
  const std::pair<const char*, double> named[] = {{"forward", costs.forward},
                                                  {"backward", costs.backward},
                                                  {"input_grad", costs.input_grad},
                                                  {"weight_grad", costs.weight_grad}};
  for (const auto& [name, cost] : named) {
    if (!std::isfinite(cost) || cost <= 0) {
      throw std::invalid_argument(fmt::format("ActionCosts: {}{} must be finite and > 0, got {}", where, name, cost));
    }
  }
}

}  // namespace

double cost_of(const Action& action, const ActionCosts& costs, bool split_backward, int chunks) {
  if (!costs.per_stage().empty()) {
    const auto stage = static_cast<std::size_t>(action.stage);
    if (action.stage < 0 || stage >= costs.per_stage().size()) {
      throw std::invalid_argument(fmt::format("ActionCosts: action {} is on stage {}, but per_stage has {} entries",
                                              action.str(), action.stage, costs.per_stage().size()));
    }
    return cost_by_kind(action, costs.per_stage()[stage], split_backward);
  }
  const StageCosts whole{costs.forward(), costs.backward(), costs.input_grad(), costs.weight_grad()};
  return cost_by_kind(action, whole, split_backward) / chunks;
}

void check_costs(const ActionCosts& costs) {
  check_named({costs.forward(), costs.backward(), costs.input_grad(), costs.weight_grad()}, "");
  for (std::size_t s = 0; s < costs.per_stage().size(); ++s) {
    check_named(costs.per_stage()[s], fmt::format("per_stage[{}].", s));
  }
}

}  // namespace colo::pipeline
