#include "sharded_adam_checks.h"

#include <c10/util/Type.h>
#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/optim/hybrid_adam.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>
#include <typeinfo>

#include "optimizer_state_entries.h"

namespace colo::detail {

void check_adam_like(const torch::optim::Optimizer& optimizer, const std::string& who) {
  const bool adam_like = dynamic_cast<const optim::HybridAdam*>(&optimizer) ||
                         dynamic_cast<const torch::optim::AdamW*>(&optimizer) ||
                         dynamic_cast<const torch::optim::Adam*>(&optimizer);
  if (!adam_like) {
    throw std::invalid_argument(fmt::format(
        "{} updates flat shards of the master weights with an Adam step, so it needs an Adam-like optimizer: "
        "torch::optim::Adam, torch::optim::AdamW or colo::optim::HybridAdam; got {}. Use one of those, or "
        "keep the optimizer unsharded (MixedPrecisionOptimizer: ZeRO stage 0) for others",
        who, c10::demangle(typeid(optimizer).name())));
  }
  for (std::size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& options = optimizer.param_groups()[g].options();
    const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options);
    const auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options);
    if ((adam && adam->amsgrad()) || (adamw && adamw->amsgrad())) {
      throw std::invalid_argument(
          fmt::format("{} does not implement amsgrad (parameter group {} has it on); turn it off", who, g));
    }
  }
}

std::vector<optim::HybridAdamOptions> adam_hyperparameters(const torch::optim::Optimizer& optimizer) {
  std::vector<optim::HybridAdamOptions> groups;
  for (const auto& group : optimizer.param_groups()) {
    const auto& options = group.options();
    if (auto* o = dynamic_cast<const optim::HybridAdamOptions*>(&options)) {
      groups.push_back(*o);
    } else if (auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) {
      groups.push_back(optim::HybridAdamOptions(o->lr())
                           .betas(o->betas())
                           .eps(o->eps())
                           .weight_decay(o->weight_decay())
                           .adamw_mode(true));
    } else if (auto* o = dynamic_cast<const torch::optim::AdamOptions*>(&options)) {
      groups.push_back(optim::HybridAdamOptions(o->lr())
                           .betas(o->betas())
                           .eps(o->eps())
                           .weight_decay(o->weight_decay())
                           .adamw_mode(false));
    } else {
      throw std::logic_error("a parameter group's options are not Adam options");  // check_adam_like
    }
  }
  return groups;
}

ShardedAdamState check_sharded_adam_state(const OptimizerWrapper::FullState& state,
                                          const std::vector<std::string>& names,
                                          const std::vector<torch::Tensor>& params,
                                          const std::vector<std::string>& model_names,
                                          const std::vector<torch::Tensor>& model_params, bool keep_masters,
                                          const torch::optim::Optimizer& optimizer,
                                          const amp::DynamicLossScaler* scaler, const std::string& who) {
  std::vector<std::string> errors;
  const auto adam_entry = [&who](const std::string& key, const std::string& state_key, const torch::Tensor& tensor,
                                 const torch::Tensor& param) -> std::optional<std::string> {
    if (state_key == "max_exp_avg_sq") {
      return fmt::format("'{}' is amsgrad state, which {} does not implement", key, who);
    }
    if (state_key != "step" && state_key != "exp_avg" && state_key != "exp_avg_sq") {
      return fmt::format("unexpected '{}' (an Adam state has step, exp_avg and exp_avg_sq)", key);
    }
    if (state_key == "step" && tensor.defined() && tensor.numel() != 1) {
      return fmt::format("'{}' has shape {}, the parameter {}", key, shape_of(tensor), shape_of(param));
    }
    return std::nullopt;
  };
  const auto sorted =
      sort_optimizer_state_entries(state.tensors, names, params, model_names, model_params, keep_masters, adam_entry, errors);
  ShardedAdamState out;
  for (const auto& [i, value] : sorted.masters) out.masters.emplace(model_names[i], value);

  std::vector<std::string> with_state, without_state;
  std::map<int64_t, std::string> steps;  // step count -> a parameter with it
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& s = sorted.param_states[i];
    if (s.empty()) {
      without_state.push_back(names[i]);
      continue;
    }
    with_state.push_back(names[i]);
    for (const char* key : {"step", "exp_avg", "exp_avg_sq"}) {
      if (!s.count(key)) errors.push_back(fmt::format("missing '{}.{}'", names[i], key));
    }
    if (s.count("step")) {
      const double value = s.at("step").item<double>();
      if (!(value >= 0.0) || value != std::floor(value)) {
        errors.push_back(fmt::format("'{}.step' must be a non-negative whole number, got {}", names[i], value));
      } else {
        steps.emplace(static_cast<int64_t>(value), names[i]);
      }
    }
  }
  if (!with_state.empty() && !without_state.empty()) {
    errors.push_back(fmt::format(
        "{} parameter(s) have optimizer state and {} have none (e.g. '{}'); {} steps every parameter together",
        with_state.size(), without_state.size(), without_state.front(), who));
  }
  if (steps.size() > 1) {
    std::vector<std::string> seen;
    for (const auto& [step, name] : steps) seen.push_back(fmt::format("{} for '{}'", step, name));
    errors.push_back(
        fmt::format("parameters have different step counts ({}); {} keeps one for all", fmt::join(seen, ", "), who));
  }
  out.scalars = parse_optimizer_scalars(state.scalars, optimizer.param_groups().size(), scaler, errors);
  if (!errors.empty()) {
    throw std::invalid_argument(
        fmt::format("{}: the optimizer state does not fit this optimizer ({} problem(s)): {}. Was it saved from the "
                    "same model and an Adam-like optimizer?",
                    who, errors.size(), fmt::join(errors, "; ")));
  }
  if (!with_state.empty()) {
    out.step = steps.begin()->first;
    for (const auto& s : sorted.param_states) {
      out.exp_avg.push_back(s.at("exp_avg"));
      out.exp_avg_sq.push_back(s.at("exp_avg_sq"));
    }
  }
  return out;
}

}  // namespace colo::detail
