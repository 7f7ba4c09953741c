#pragma once

#include <torch/torch.h>

namespace colo::nn::init {

// Fills `tensor` in place from N(mean, std²) truncated to [a, b] (absolute bounds, as in timm
// and torch.nn.init.trunc_normal_), by inverse-CDF sampling; LibTorch lacks this initialiser.
// Draws from the default generator, so torch::manual_seed makes it deterministic.
torch::Tensor trunc_normal_(torch::Tensor tensor, double mean = 0.0, double std = 1.0, double a = -2.0,
                            double b = 2.0);

// timm's default init of a linear layer: weight ~ trunc_normal(std 0.02), bias 0.
void timm_linear_init_(torch::nn::LinearImpl& linear);

}  // namespace colo::nn::init
