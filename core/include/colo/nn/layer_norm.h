#pragma once

#include <torch/torch.h>

namespace colo::nn {

// at::layer_norm with colo's backward: the input gradient is ATen's, and on CUDA the weight and bias
// gradients come from a kernel of colo's own (core/src/kernels/layer_norm_affine_grad.h), which
// reads the output gradient and the input once at full memory bandwidth. ATen's kernel for them
// took 224 of LayerNorm's 312 us backward at ViT-B/16's shape on an H200 (25 calls per training
// step). Elsewhere (the CPU, other dtypes, shapes the kernel does not take) the whole backward is
// ATen's. Without a weight it is at::layer_norm itself. Differentiable once (no double backward).
torch::Tensor layer_norm(const torch::Tensor& input, at::IntArrayRef normalized_shape, const torch::Tensor& weight,
                         const torch::Tensor& bias, double eps);

// The same for a torch::nn::LayerNorm module's parameters and options (its forward, with colo's backward).
torch::Tensor layer_norm(const torch::Tensor& input, const torch::nn::LayerNormImpl& norm);

// Whether the CUDA kernel computes the weight and bias gradients for these tensors (a test hook,
// and what the backward itself asks): CUDA fp32, fp16 or bf16, contiguous, the normalized size a
// multiple of 16 bytes' worth of elements, in a CUDA build.
bool layer_norm_uses_colo_kernel(const torch::Tensor& grad, const torch::Tensor& input, int64_t normalized_size);

}  // namespace colo::nn
