#include <colo/booster/optimizer_wrapper.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo {

void OptimizerWrapper::backward_by_grad(const std::vector<torch::Tensor>& outputs,
                                        const std::vector<torch::Tensor>& grads) {
  if (outputs.size() != grads.size()) {
    throw std::invalid_argument(fmt::format("backward_by_grad: {} outputs but {} gradients; give one gradient per output",
                                            outputs.size(), grads.size()));
  }
  torch::autograd::backward(outputs, grads);
}

}  // namespace colo
