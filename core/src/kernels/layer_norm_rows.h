#pragma once

// LayerNorm's row-wise work as CUDA kernels of colo's own (CUDA builds only): the forward pass,
// optionally after the residual add that precedes it in a transformer block, and the input
// gradient, optionally plus the gradient that reaches the residual stream past the norm.
//
// One warp per row, the row held in registers (16-byte loads, fp32 arithmetic), so each tensor is
// read once and written once. ATen's forward reached ~1.3 TB/s at ViT-B's shape (50432 x 768,
// bf16, H200) where the copy bandwidth is ~4 TB/s, and its add and its backward each cost one more
// pass over the rows (benchmarks/peers/fusion_probe.py). Kept free of LibTorch headers: nvcc
// compiles it alone.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_type.h"

namespace colo::kernels {

// Whether the row kernels take rows of `cols` elements of `dtype`: a multiple of the 16-byte vector
// width, and at most 32 lanes x 8 vectors (2048 half-precision or 1024 fp32 elements). All
// pointers must be 16-byte aligned and the tensors contiguous.
bool layer_norm_rows_supported(ElementType dtype, int64_t cols);

// y = (s - mean) * rstd * gamma + beta over each row of s, where s = x, or s = x + residual (rounded
// to the dtype, as the separate add would) when residual is given, then also written to sum.
// mean and rstd are fp32 [rows] (rstd = 1 / sqrt(var + eps), var the biased variance). beta may
// be null (no bias). Returns the launch's error.
cudaError_t layer_norm_rows_forward(ElementType dtype, const void* x, const void* residual, void* sum,
                                    const void* gamma, const void* beta, float eps, int64_t rows, int64_t cols,
                                    void* y, float* mean, float* rstd, cudaStream_t stream);

// dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) with g = dy * gamma, x_hat = (x - mean) * rstd,
// the means over the row; plus residual_grad when given (may be null). dx may alias
// residual_grad. Returns the launch's error.
cudaError_t layer_norm_rows_input_grad(ElementType dtype, const void* dy, const void* x, const float* mean,
                                       const float* rstd, const void* gamma, const void* residual_grad,
                                       int64_t rows, int64_t cols, void* dx, cudaStream_t stream);

}  // namespace colo::kernels
