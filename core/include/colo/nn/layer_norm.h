#pragma once

#include <torch/torch.h>

namespace colo::nn {

// at::layer_norm through colo's CUDA kernels where they apply: the forward and the input gradient
// one warp per row (core/src/kernels/layer_norm_rows.h), the weight and bias gradients column-wise
// (layer_norm_affine_grad.h); each reads its tensors once at close to full memory bandwidth, where
// ATen's do not at ViT-B/16's shape (25 calls per training step; benchmarks/RESULTS.md has the
// measurements). Elsewhere (the CPU, other dtypes, shapes the kernels do not take) it is ATen's
// native_layer_norm and its backward. Without a weight it is at::layer_norm itself.
// Differentiable once (no double backward).
torch::Tensor layer_norm(const torch::Tensor& input, at::IntArrayRef normalized_shape, const torch::Tensor& weight,
                         const torch::Tensor& bias, double eps);

// The same for a torch::nn::LayerNorm module's parameters and options (its forward, with colo's backward).
torch::Tensor layer_norm(const torch::Tensor& input, const torch::nn::LayerNormImpl& norm);

// (input + branch, layer_norm(input + branch)): a transformer block's residual add and the norm
// after it, in one pass over the rows forward (the kernel writes the sum and the normalised
// output) and one backward (the sum's gradient is added to the norm's input gradient in the
// kernel). Both inputs get the same gradient. Where the kernels do not apply (or the shapes
// differ: broadcasting), ATen's add and colo::nn::layer_norm.
std::pair<torch::Tensor, torch::Tensor> add_layer_norm(const torch::Tensor& input, const torch::Tensor& branch,
                                                       const torch::nn::LayerNormImpl& norm);

// Whether the row kernels (forward and input gradient) take this input and these parameters (a test
// hook, and what the functions ask): CUDA fp32, fp16 or bf16 throughout, contiguous and 16-byte
// aligned, the normalised size a multiple of 16 bytes' worth of elements and at most 2048 (fp16,
// bf16) or 1024 (fp32) elements, in a CUDA build.
bool layer_norm_rows_use_colo_kernel(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);

// Whether the CUDA kernel computes the weight and bias gradients for these tensors (a test hook,
// and what the backward itself asks): CUDA fp32, fp16 or bf16, contiguous, the normalized size a
// multiple of 16 bytes' worth of elements, in a CUDA build.
bool layer_norm_uses_colo_kernel(const torch::Tensor& grad, const torch::Tensor& input, int64_t normalized_size);

}  // namespace colo::nn
