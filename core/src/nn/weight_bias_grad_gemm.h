#pragma once

// A linear layer's weight and bias gradients in one cuBLASLt product: the bias gradient (the sum
// of the output gradient over its rows) comes out of the weight gradient's epilogue
// (CUBLASLT_EPILOGUE_BGRADB), so the output gradient is read once instead of a second time by a
// matrix-vector product. Private to core/src/nn (colo::nn::linear's backward).
#include <torch/types.h>

#include <optional>
#include <utility>

namespace colo::nn::detail {

// Whether weight_and_bias_grad below takes these: a CUDA build, CUDA bf16 or fp16 matrices of one
// dtype, both contiguous, at least one row.
bool weight_bias_grad_gemm_applies(const torch::Tensor& grad_rows, const torch::Tensor& input_rows);

// grad_rows [M, N] (the output gradient), input_rows [M, K] (the layer's input): returns
// {grad_rowsᵀ · input_rows [N, K], Σ_m grad_rows[m, :] [N]}, in their dtype, summed in fp32;
// nothing when cuBLASLt has no algorithm for the shape (the caller computes them otherwise).
// Only where weight_bias_grad_gemm_applies (a precondition, checked).
std::optional<std::pair<torch::Tensor, torch::Tensor>> weight_and_bias_grad(const torch::Tensor& grad_rows,
                                                                            const torch::Tensor& input_rows);

}  // namespace colo::nn::detail
