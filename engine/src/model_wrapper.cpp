#include <colo/engine/model_wrapper.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>
#include <stdexcept>

namespace colo {

std::vector<std::pair<std::string, torch::Tensor>> ModelWrapper::full_state() const {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& item : module_->canonical_named_parameters()) state.emplace_back(item.key(), item.value().detach());
  for (const auto& item : module_->canonical_named_buffers()) state.emplace_back(item.key(), item.value().detach());
  return state;
}

void ModelWrapper::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  check_full_state(state);
  std::map<std::string, torch::Tensor> given(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (const auto& item : module_->canonical_named_parameters()) item.value().copy_(given.at(item.key()));
  for (const auto& item : module_->canonical_named_buffers()) item.value().copy_(given.at(item.key()));
}

void ModelWrapper::check_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) const {
  std::map<std::string, torch::Tensor> given(state.begin(), state.end());
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& item : module_->canonical_named_parameters()) targets.emplace_back(item.key(), item.value());
  for (const auto& item : module_->canonical_named_buffers()) targets.emplace_back(item.key(), item.value());

  std::vector<std::string> missing, mismatched;
  std::set<std::string> known;
  for (const auto& [name, target] : targets) {
    known.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (it->second.sizes() != target.sizes()) {
      mismatched.push_back(fmt::format("{} (checkpoint {}, model {})", name, it->second.sizes(), target.sizes()));
    } else if (it->second.scalar_type() != target.scalar_type() &&
               !(it->second.is_floating_point() && target.is_floating_point())) {
      // Floating-point values convert (an fp32 checkpoint into bf16 working weights); anything
      // else (integer counters, flags) must match exactly.
      mismatched.push_back(fmt::format("{} (checkpoint {}, model {})", name, c10::toString(it->second.scalar_type()),
                                       c10::toString(target.scalar_type())));
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : given) {
    if (known.count(name) == 0) unexpected.push_back(name);
  }
  if (!missing.empty() || !mismatched.empty() || !unexpected.empty()) {
    throw std::runtime_error(fmt::format(
        "the checkpoint does not fit this model: {} missing [{}], {} with other shapes or dtypes [{}], {} unexpected [{}]; was it "
        "saved from a model of the same configuration?",
        missing.size(), fmt::join(missing, ", "), mismatched.size(), fmt::join(mismatched, ", "), unexpected.size(),
        fmt::join(unexpected, ", ")));
  }
}

}  // namespace colo
