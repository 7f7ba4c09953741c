#include "parameter_match.h"

#include <colo/nn/layer_stack.h>
#include <colo/optim/optimizer_state.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "optimizer_state_entries.h"

namespace colo::detail {

ParameterMatch match_optimizer_to_model(const nn::LayerStack& model, const torch::optim::Optimizer& optimizer,
                                             const std::string& who) {
  ParameterMatch out;
  std::unordered_map<const void*, std::size_t> model_index;
  for (const auto& item : model.canonical_named_parameters()) {
    model_index.emplace(item.value().unsafeGetTensorImpl(), out.model_params.size());
    out.model_names.push_back(item.key());
    out.model_params.push_back(item.value());
  }
  std::vector<std::string> strangers;
  std::unordered_map<std::size_t, std::size_t> group_of;  // model index -> group
  std::size_t k = 0;
  for (std::size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    for (const auto& p : optimizer.param_groups()[g].params()) {
      auto it = model_index.find(p.unsafeGetTensorImpl());
      if (it == model_index.end()) {
        strangers.push_back(fmt::format("#{} {}", k, shape_of(p)));
      } else {
        out.model_index.push_back(it->second);
        group_of.emplace(it->second, g);
      }
      ++k;
    }
  }
  if (!strangers.empty()) {
    throw std::invalid_argument(fmt::format(
        "{}: {} optimizer parameter(s) are not parameters of the model: {}; build the optimizer over "
        "model->parameters()",
        who, strangers.size(), fmt::join(strangers, ", ")));
  }
  for (std::size_t i = 0; i < out.model_params.size(); ++i) {
    auto it = group_of.find(i);
    if (it == group_of.end() || !out.model_params[i].requires_grad()) {
      out.others.push_back(i);
    } else {
      out.stepped.push_back(i);
      out.stepped_group.push_back(it->second);
    }
  }
  return out;
}

std::string max_grad_norm_problem(double max_grad_norm) {
  if (max_grad_norm >= 0.0 && std::isfinite(max_grad_norm)) return {};
  return fmt::format("max_grad_norm must be finite and >= 0 (0 disables clipping), got {}", max_grad_norm);
}

ShardableParameters floating_stepped_parameters(const ParameterMatch& matched, const std::string& who) {
  ShardableParameters out;
  for (std::size_t s = 0; s < matched.stepped.size(); ++s) {
    const auto i = matched.stepped[s];
    if (!matched.model_params[i].is_floating_point()) {
      throw std::invalid_argument(
          fmt::format("{}: parameter '{}' is not floating point", who, matched.model_names[i]));
    }
    out.names.push_back(matched.model_names[i]);
    out.params.push_back(matched.model_params[i]);
    out.groups.push_back(matched.stepped_group[s]);
  }
  return out;
}

void zero_defined_grads(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (!grads.empty()) at::_foreach_zero_(grads);
}

}  // namespace colo::detail
