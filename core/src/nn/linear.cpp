#include "colo/nn/linear.h"

namespace colo::nn {

torch::Tensor LinearImpl::forward(const torch::Tensor& input) { return torch::linear(input, weight, bias); }

}  // namespace colo::nn
