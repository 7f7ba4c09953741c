#include "optimizer_state_entries.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_map>

namespace colo::detail {

std::string shape_of(const torch::Tensor& tensor) { return fmt::format("[{}]", fmt::join(tensor.sizes(), ", ")); }

namespace {

std::unordered_map<std::string, std::size_t> index_of(const std::vector<std::string>& names) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
  return index;
}

std::string shape_error(const std::string& key, const torch::Tensor& tensor, const torch::Tensor& param) {
  return fmt::format("'{}' has shape {}, the parameter {}", key, tensor.defined() ? shape_of(tensor) : "undefined",
                     shape_of(param));
}

}  // namespace

OptimizerStateEntries sort_optimizer_state_entries(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                                   const std::vector<std::string>& param_names,
                                                   const std::vector<torch::Tensor>& params,
                                                   const std::vector<std::string>& model_names,
                                                   const std::vector<torch::Tensor>& model_params, bool keep_masters,
                                                   const StateEntryCheck& check, std::vector<std::string>& errors) {
  const auto param_index = index_of(param_names);
  const auto model_index = index_of(model_names);
  OptimizerStateEntries sorted;
  sorted.param_states.resize(param_names.size());
  for (const auto& [key, tensor] : tensors) {
    if (key.rfind("master.", 0) == 0) {
      sorted.any_master = true;
      if (!keep_masters) continue;
      const auto name = key.substr(7);
      auto it = model_index.find(name);
      if (it == model_index.end()) {
        errors.push_back(fmt::format("unexpected '{}' (no model parameter '{}')", key, name));
      } else if (!tensor.defined() || tensor.sizes() != model_params[it->second].sizes()) {
        errors.push_back(shape_error(key, tensor, model_params[it->second]));
      } else {
        sorted.masters[it->second] = tensor;
      }
      continue;
    }
    const auto dot = key.rfind('.');
    auto it = dot == std::string::npos ? param_index.end() : param_index.find(key.substr(0, dot));
    if (it == param_index.end()) {
      errors.push_back(fmt::format("unexpected '{}' (not '<parameter>.<state key>' of an optimized parameter)", key));
      continue;
    }
    const auto state_key = key.substr(dot + 1);
    const auto& param = params[it->second];
    if (auto problem = check ? check(key, state_key, tensor, param) : std::nullopt) {
      errors.push_back(std::move(*problem));
    } else if (!tensor.defined() || (state_key != "step" && tensor.sizes() != param.sizes())) {
      errors.push_back(shape_error(key, tensor, param));
    } else {
      sorted.param_states[it->second][state_key] = tensor;
    }
  }
  if (keep_masters && sorted.any_master) {
    for (std::size_t i = 0; i < model_names.size(); ++i) {
      if (!sorted.masters.count(i)) errors.push_back(fmt::format("missing 'master.{}'", model_names[i]));
    }
  }
  return sorted;
}

}  // namespace colo::detail
