#include "master_weights_state.h"

namespace colo::detail {

std::unordered_map<const void*, torch::Tensor> masters_by_working(const amp::MasterWeights& masters) {
  std::unordered_map<const void*, torch::Tensor> out;
  for (std::size_t i = 0; i < masters.working_params().size(); ++i) {
    out.emplace(masters.working_params()[i].unsafeGetTensorImpl(), masters.master_params()[i]);
  }
  return out;
}

NamedTensors named_masters(const nn::LayerStack& module, const amp::MasterWeights& masters) {
  const auto master_of = masters_by_working(masters);
  NamedTensors out;
  for (const auto& item : module.canonical_named_parameters()) {
    auto it = master_of.find(item.value().unsafeGetTensorImpl());
    if (it != master_of.end()) out.emplace_back(item.key(), it->second);
  }
  return out;
}

void overlay_masters(NamedTensors& state, const NamedTensors& masters) {
  std::unordered_map<std::string, torch::Tensor> by_name(masters.begin(), masters.end());
  for (auto& [name, tensor] : state) {
    auto it = by_name.find(name);
    if (it != by_name.end()) tensor = it->second.detach();
  }
}

void load_masters(const NamedTensors& state, const NamedTensors& masters) {
  std::unordered_map<std::string, torch::Tensor> given(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, master] : masters) master.copy_(given.at(name));
}

}  // namespace colo::detail
