#pragma once

#include <torch/types.h>

#include <cstdint>

namespace colo::nn::detail {

// n ones in `like`'s dtype and device, for a bias gradient computed as a matrix-vector product
// (colo::nn::linear, colo::nn::fp8_linear). Kept per autograd thread and device, grown as needed
// and remade when the current stream changes, so a step does not fill one per linear layer.
torch::Tensor ones_vector(int64_t n, const torch::Tensor& like);

}  // namespace colo::nn::detail
