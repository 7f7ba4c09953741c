#include "torch_ddp_model.h"

#include <colo/ddp/broadcast_coalesced.h>
#include <colo/dist/process_group.h>

#include <unordered_map>

namespace colo::plugins {

TorchDdpModel::TorchDdpModel(std::shared_ptr<nn::LayerStack> module, std::shared_ptr<ddp::BucketedAllReduce> reducer,
                             amp::PrecisionPolicy policy, std::shared_ptr<amp::MasterWeights> masters,
                             std::shared_ptr<dist::ProcessGroup> buffer_sync_group)
    : ModelWrapper(std::move(module)),
      reducer_(std::move(reducer)),
      policy_(policy),
      masters_(std::move(masters)),
      buffer_sync_group_(std::move(buffer_sync_group)),
      buffers_(module_->buffers()) {}

torch::Tensor TorchDdpModel::forward(const torch::Tensor& input) {
  if (buffer_sync_group_ && !buffers_.empty() && is_training()) {
    ddp::broadcast_coalesced(*buffer_sync_group_, buffers_, 0);
  }
  if (reducer_ && torch::GradMode::is_enabled()) reducer_->prepare_for_backward();
  const auto cast = policy_.cast_to_compute(input);
  auto output = graphed_ ? graphed_->forward(cast) : module_->forward(cast);
  return output.is_floating_point() ? output.to(torch::kFloat) : output;
}

// A world of one has no reducer: nothing to switch, nothing to reduce.
void TorchDdpModel::set_gradient_sync(bool enabled) {
  if (reducer_) reducer_->set_sync(enabled);
}
bool TorchDdpModel::gradient_sync() const { return !reducer_ || reducer_->sync_enabled(); }
void TorchDdpModel::reduce_accumulated_gradients() {
  if (reducer_) reducer_->reduce_accumulated();
}

std::vector<std::pair<std::string, torch::Tensor>> TorchDdpModel::named_masters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (!masters_) return out;
  std::unordered_map<const void*, torch::Tensor> master_of;
  for (std::size_t i = 0; i < masters_->working_params().size(); ++i) {
    master_of.emplace(masters_->working_params()[i].unsafeGetTensorImpl(), masters_->master_params()[i]);
  }
  for (const auto& item : module_->canonical_named_parameters()) {
    auto it = master_of.find(item.value().unsafeGetTensorImpl());
    if (it != master_of.end()) out.emplace_back(item.key(), it->second);
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> TorchDdpModel::full_state() const {
  auto state = ModelWrapper::full_state();
  if (!masters_) return state;
  std::unordered_map<std::string, torch::Tensor> masters;
  for (auto& [name, master] : named_masters()) masters.emplace(name, master);
  for (auto& [name, tensor] : state) {
    auto it = masters.find(name);
    if (it != masters.end()) tensor = it->second.detach();
  }
  return state;
}

void TorchDdpModel::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  ModelWrapper::load_full_state(state);  // validates everything, then writes the working weights
  if (!masters_) return;
  // The masters take the saved values themselves, not their rounding to the working dtype.
  std::unordered_map<std::string, torch::Tensor> given(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (auto& [name, master] : named_masters()) master.copy_(given.at(name));
}

}  // namespace colo::plugins
