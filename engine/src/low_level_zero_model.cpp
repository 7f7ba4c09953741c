#include <colo/engine/low_level_zero_model.h>

#include <colo/zero/bucketed_all_gather.h>
#include <colo/zero/grad_reducer.h>
#include <colo/zero/shard_layout.h>

#include <map>
#include <set>
#include <unordered_map>

#include "master_weights_state.h"

namespace colo {

LowLevelZeroModel::LowLevelZeroModel(std::shared_ptr<nn::LayerStack> module, std::shared_ptr<ZeroOptimizer> optimizer)
    : ModelWrapper(std::move(module)), optimizer_(std::move(optimizer)), policy_(optimizer_->options().precision()) {
  std::unordered_map<const void*, std::size_t> bucket_of;
  for (std::size_t p = 0; p < optimizer_->params().size(); ++p) {
    bucket_of.emplace(optimizer_->params()[p].unsafeGetTensorImpl(), optimizer_->layout().bucket_of(p));
  }
  for (const auto& layer : module_->layers()) {
    std::set<std::size_t> buckets;
    for (const auto& p : layer->parameters()) {
      auto it = bucket_of.find(p.unsafeGetTensorImpl());
      if (it != bucket_of.end()) buckets.insert(it->second);
    }
    layer_buckets_.emplace_back(buckets.begin(), buckets.end());
  }
}

torch::Tensor LowLevelZeroModel::forward(const torch::Tensor& input) {
  if (torch::GradMode::is_enabled()) optimizer_->reducer().prepare_for_backward();
  auto& gather = optimizer_->gather();
  auto h = policy_.cast_to_compute(input);
  if (!gather.in_flight()) {
    h = module_->forward(h);
  } else {
    for (std::size_t k = 0; k < module_->size(); ++k) {
      for (auto b : layer_buckets_[k]) gather.wait(b);
      h = module_->layer(k)->run(h);
    }
    gather.wait_all();
  }
  return detail::fp32_output(h);
}

std::vector<std::pair<std::string, torch::Tensor>> LowLevelZeroModel::full_state() const {
  std::unordered_map<std::string, torch::Tensor> masters;
  for (auto& [name, value] : optimizer_->full_masters()) masters.emplace(name, value);
  optimizer_->gather().wait_all();  // the parameters outside the optimizer are read as they are
  auto state = ModelWrapper::full_state();
  for (auto& [name, tensor] : state) {
    auto it = masters.find(name);
    if (it != masters.end()) tensor = it->second;
  }
  return state;
}

void LowLevelZeroModel::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  optimizer_->gather().wait_all();       // or a gather in flight would overwrite what is loaded
  ModelWrapper::load_full_state(state);  // validates everything, then writes the working weights
  // The masters take the saved values themselves, not their rounding to the working dtype.
  optimizer_->load_masters(std::map<std::string, torch::Tensor>(state.begin(), state.end()));
}

}  // namespace colo
