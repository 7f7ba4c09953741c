#pragma once

#include <torch/torch.h>

namespace colo::nn {

// gelu(linear(input, weight, bias)) (exact GELU), the MLP's fc1 and activation as one autograd
// function: on CUDA the bias gradient is summed in the GELU backward kernel while it writes the
// pre-activation gradient (core/src/kernels/gelu.h), instead of by a separate product that reads
// that gradient again; the weight and input gradients are the products colo::nn::linear computes,
// and zero-bubble pipelines defer the weight and bias gradients as they do there. Elsewhere (the
// CPU, other dtypes, no bias, shapes the kernel does not take) it is colo::nn::gelu over
// colo::nn::linear. Saves what those two save (the input and the pre-activation). Differentiable once.
torch::Tensor linear_gelu(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);

// Whether linear_gelu's fused kernel runs for these tensors (a test hook): CUDA fp32, fp16 or bf16
// throughout, a bias, the output features a multiple of 16 bytes' worth, in a CUDA build.
bool linear_gelu_uses_colo_kernel(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace colo::nn
