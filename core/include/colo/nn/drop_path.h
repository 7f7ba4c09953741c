#pragma once

#include <torch/torch.h>

namespace colo::nn {

// Stochastic depth (timm's drop_path): in training, zeroes each sample's whole residual branch
// with probability p and scales the survivors by 1 / (1 - p) so the expectation is unchanged.
// The identity when p == 0 or in evaluation.
torch::Tensor drop_path(const torch::Tensor& x, double p, bool training);

}  // namespace colo::nn
