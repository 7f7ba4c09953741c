#pragma once

// The gradients of LayerNorm's weight and bias, as a CUDA kernel of colo's own (CUDA builds only).
//
// For y = x_hat * gamma + beta over the last `cols` elements of each of `rows` rows, with
// x_hat = (x - mean[row]) * rstd[row]:
//   dgamma[c] = sum over rows of dy[r, c] * x_hat[r, c]      dbeta[c] = sum over rows of dy[r, c]
// ATen computes these in a kernel that reaches about a fifth of an H200's memory bandwidth at
// ViT-B's shape (50432 x 768, bf16), most of LayerNorm's backward (measured by
// benchmarks/peers/backward_reduction_probe.py; benchmarks/RESULTS.md). This one reads dy and x once, with 16-byte loads,
// and sums in fp32: each block a tile of columns over a chunk of rows, one partial sum per chunk.
//
// Kept free of LibTorch headers: nvcc compiles it alone; colo::nn::layer_norm wraps it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_type.h"

namespace colo::kernels {

// Elements per 16-byte load: `cols` must be a multiple of it, and dy and x 16-byte aligned.
int layer_norm_affine_grad_vector_width(ElementType dtype);

// How many row chunks the kernel splits `rows` into on `device`: the first dimension of the
// partial sums the caller allocates (enough blocks to fill every multiprocessor a few times).
int64_t layer_norm_affine_grad_chunks(ElementType dtype, int64_t rows, int64_t cols, int device);

// Writes the per-chunk partial sums: gamma_partial and beta_partial are [chunks, cols] fp32,
// chunks from layer_norm_affine_grad_chunks; the caller sums them over the chunks. mean and rstd
// are fp32 [rows]. Returns the launch's error (cudaSuccess when the kernel was queued).
cudaError_t layer_norm_affine_grad_partials(ElementType dtype, const void* grad, const void* input,
                                            const float* mean, const float* rstd, int64_t rows, int64_t cols,
                                            int64_t chunks, float* gamma_partial, float* beta_partial,
                                            cudaStream_t stream);

}  // namespace colo::kernels
