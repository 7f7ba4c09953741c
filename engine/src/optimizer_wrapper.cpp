#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/engine/optimizer_wrapper.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo {

OptimizerWrapper::OptimizerWrapper() = default;
OptimizerWrapper::~OptimizerWrapper() = default;

void OptimizerWrapper::backward(const torch::Tensor& loss) {
  if (scaler_) {
    scaler_->scale_loss(loss).backward();
  } else {
    loss.backward();
  }
}

int64_t OptimizerWrapper::skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }

void OptimizerWrapper::backward_by_grad(const std::vector<torch::Tensor>& outputs,
                                        const std::vector<torch::Tensor>& grads) {
  if (outputs.size() != grads.size()) {
    throw std::invalid_argument(fmt::format("backward_by_grad: {} outputs but {} gradients; give one gradient per output",
                                            outputs.size(), grads.size()));
  }
  torch::autograd::backward(outputs, grads);
}

}  // namespace colo
