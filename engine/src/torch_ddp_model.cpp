#include <colo/engine/torch_ddp_model.h>

#include <colo/ddp/broadcast_coalesced.h>
#include <colo/dist/process_group.h>

#include "master_weights_state.h"

namespace colo {

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
  return detail::fp32_output(output);
}

// A world of one has no reducer: nothing to switch, nothing to reduce.
void TorchDdpModel::set_gradient_sync(bool enabled) {
  if (reducer_) reducer_->set_sync(enabled);
}
bool TorchDdpModel::gradient_sync() const { return !reducer_ || reducer_->sync_enabled(); }
void TorchDdpModel::reduce_accumulated_gradients() {
  if (reducer_) reducer_->reduce_accumulated();
}

std::vector<std::pair<std::string, torch::Tensor>> TorchDdpModel::full_state() const {
  auto state = ModelWrapper::full_state();
  if (masters_) detail::overlay_masters(state, detail::named_masters(*module_, *masters_));
  return state;
}

void TorchDdpModel::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  ModelWrapper::load_full_state(state);  // validates everything, then writes the working weights
  if (masters_) detail::load_masters(state, detail::named_masters(*module_, *masters_));
}

}  // namespace colo
