#include "optimizer_scalars.h"

#include <colo/optim/optimizer_state.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::detail {

std::map<std::string, double> optimizer_scalars(const torch::optim::Optimizer& optimizer,
                                                const amp::DynamicLossScaler* scaler) {
  std::map<std::string, double> scalars;
  for (std::size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    scalars["lr." + std::to_string(g)] = optim::get_lr(optimizer, g);
  }
  if (scaler) {
    for (const auto& [key, value] : scaler->state_dict()) scalars["loss_scaler." + key] = value;
  }
  return scalars;
}

OptimizerScalars parse_optimizer_scalars(const std::map<std::string, double>& scalars, std::size_t num_groups,
                                         const amp::DynamicLossScaler* scaler, std::vector<std::string>& errors) {
  OptimizerScalars parsed;
  parsed.lrs.assign(num_groups, 0.0);
  std::vector<bool> lr_given(num_groups, false);
  for (const auto& [key, value] : scalars) {
    if (key.rfind("loss_scaler.", 0) == 0) {
      parsed.scaler_state[key.substr(12)] = value;
      continue;
    }
    const auto suffix = key.rfind("lr.", 0) == 0 ? key.substr(3) : std::string();
    const bool known = !suffix.empty() && suffix.size() < 10 &&
                       suffix.find_first_not_of("0123456789") == std::string::npos && std::stoull(suffix) < num_groups;
    if (!known) {
      errors.push_back(fmt::format("unexpected scalar '{}' (the optimizer has {} parameter groups)", key, num_groups));
      continue;
    }
    parsed.lrs[std::stoull(suffix)] = value;
    lr_given[std::stoull(suffix)] = true;
  }
  for (std::size_t g = 0; g < num_groups; ++g) {
    if (!lr_given[g]) {
      errors.push_back(fmt::format("missing scalar 'lr.{}' (the optimizer has {} parameter groups)", g, num_groups));
    }
  }
  if (scaler && !parsed.scaler_state.empty()) {
    try {
      amp::DynamicLossScaler probe(scaler->options());
      probe.load_state_dict(parsed.scaler_state);
    } catch (const std::invalid_argument& e) {
      errors.push_back(fmt::format("loss scaler: {}", e.what()));
    }
  }
  return parsed;
}

void apply_optimizer_scalars(const OptimizerScalars& parsed, torch::optim::Optimizer& optimizer,
                             amp::DynamicLossScaler* scaler) {
  for (std::size_t g = 0; g < parsed.lrs.size(); ++g) optim::set_lr(optimizer, g, parsed.lrs[g]);
  if (scaler && !parsed.scaler_state.empty()) scaler->load_state_dict(parsed.scaler_state);
}

}  // namespace colo::detail
