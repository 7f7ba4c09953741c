#pragma once

#include <torch/types.h>

namespace colo::nn::detail {

// A linear layer's bias gradient: the rows of the output gradient `rows` ([R, out]) summed, in
// its dtype (fp32 sums, rounded once). On a GPU, colo's column-sum kernel (core/src/kernels/
// column_sum.h) where it takes the tensor (contiguous, 16-byte aligned, out a multiple of its
// vector width), else cuBLAS's product with a ones vector; on a CPU, fp32 sums for bf16/fp16
// (LibTorch 1.13's CPU products would accumulate in the dtype). colo::nn::linear and fp8_linear.
torch::Tensor bias_gradient(const torch::Tensor& rows);

// Whether bias_gradient(rows) runs colo's kernel (tests ask).
bool bias_gradient_uses_colo_kernel(const torch::Tensor& rows);

}  // namespace colo::nn::detail
