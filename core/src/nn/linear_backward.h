#pragma once

#include <torch/torch.h>

namespace colo::nn::detail {

// Input, weight and bias gradients of y = input · weightᵀ (+ bias) from the output gradient
// `grad`, as colo::nn::linear's backward takes them (core/src/nn/linear.cpp). `bias` may be
// undefined (no bias). `known_bias_grad`, where defined, is the bias gradient already summed by
// the kernel that produced `grad` (linear_gelu's GELU backward), used instead of summing again.
// Under a WeightGradDeferral the weight and bias gradients are set aside for W and returned
// undefined.
torch::autograd::tensor_list linear_backward(const torch::Tensor& input, const torch::Tensor& weight,
                                             const torch::Tensor& bias, const torch::Tensor& grad, bool need_input,
                                             bool need_weight, bool need_bias,
                                             const torch::Tensor& known_bias_grad = torch::Tensor());

}  // namespace colo::nn::detail
