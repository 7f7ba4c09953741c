#pragma once

#include <torch/torch.h>

namespace colo::nn {

// The exact (erf) GELU, timm's nn.GELU(): on CUDA the forward through colo's kernel
// (core/src/kernels/gelu.h: ATen's fp32 arithmetic with more loads in flight) and the backward ATen's gelu_backward; elsewhere torch::gelu.
// Saves its input for the backward, as ATen's does. Differentiable once.
torch::Tensor gelu(const torch::Tensor& input);

// Whether colo's kernels run for this tensor (a test hook): a CUDA fp32, fp16 or bf16 tensor,
// contiguous and 16-byte aligned, in a CUDA build.
bool gelu_uses_colo_kernel(const torch::Tensor& input);

}  // namespace colo::nn
